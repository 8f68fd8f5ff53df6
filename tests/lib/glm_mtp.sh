# tests/lib/glm_mtp.sh -- the body of t_glm_mtp.sh (glm-dsa) and
# t_g5n_mtp.sh (glm5-next): a GLM NextN (MTP) block against the float64
# reference, in ds4, ds4-server and ds4-agent, from a sidecar, and its
# refusals -- one script for both graphs (their header comments list the
# checks).  Sourced from the repository root with:
#   NAME  the calling test's name (messages, temporary directory)
#   ARCH  glm-dsa | glm5-next (tests/glm_gguf.py's tiny file of that graph)
#   NL    its trunk's layer count (the block is blk.<NL>.*)
#   MTPN  the block's tensor count (--inspect's MTP block)
PY=/usr/bin/python3
BD=${DS4_BIN_DIR:-.}
TB="${DS4_BUILD_DIR:-build}/tests/test_glm_mtp"
T=$(mktemp -d "${TMPDIR:-/tmp}/ds4-$NAME.XXXXXX")
. tests/lib/server.sh
trap 'server_stop; rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

$PY -c "import random; r=random.Random(11); print(' '.join(str(r.randrange(10, 4090)) for _ in range(100)))" \
    > "$T/ids.txt"
M="$T/n.gguf"
$PY tests/glm_gguf.py "$ARCH" "$M" --set nextn=1 > "$T/gen.log" 2>&1 &&
    $PY tests/glm_gguf.py "$ARCH" "$T/nh.gguf" --set nextn=1 --set nextn_head=1 >> "$T/gen.log" 2>&1 &&
    $PY tests/glm_gguf.py "$ARCH" "$T/plain.gguf" >> "$T/gen.log" 2>&1 ||
    { cat "$T/gen.log"; echo "FAIL glm_gguf.py"; exit 1; }

# --- 1. against the reference -------------------------------------------------
$PY tests/oracle/glm_ref.py "$M" --tokens-file "$T/ids.txt" -o "$T/main.ref" --indexer "$T/ix.f32" \
    > "$T/ref.log" 2>&1 || { bad "glm_ref.py (main)"; cat "$T/ref.log"; }
cmp_rows() {   # cmp_rows NAME DS4 REF IX: 1e-5 and the same top-1 before the first tie
    $PY tests/llamacpp_compare.py "$2" "$3" "$4" 4096 "$NL" --tol 1e-5 --tie-eps 1e-5 --min-selecting "${5:-0}" \
        > "$T/$1.cmp" 2>&1
    local r=$?
    sed 's/^/     /' "$T/$1.cmp"
    return $r
}
for f in n nh; do
    if ! "$TB" "$T/$f.gguf" "$T/ids.txt" "$T/$f.pos" "$T/$f.chain" "$T/$f.drafts" "$T/plain.gguf" > "$T/$f.test" 2>&1; then
        bad "test_glm_mtp ($f.gguf):"; cat "$T/$f.test"; continue
    fi
    sed 's/^/     /' "$T/$f.test"
    ok "$f.gguf: draft logits bit for bit the same however the session got there; MTP greedy == plain greedy"
    if $PY tests/oracle/glm_ref.py "$T/$f.gguf" --tokens-file "$T/ids.txt" --mtp "$T/$f.rpos" > "$T/$f.rl" 2>&1 &&
            $PY tests/oracle/glm_ref.py "$T/$f.gguf" --tokens-file "$T/ids.txt" --mtp "$T/$f.rchain" \
                --mtp-drafts "$(cat "$T/$f.drafts")" >> "$T/$f.rl" 2>&1; then
        cmp_rows "$f.pos" "$T/$f.pos" "$T/$f.rpos" "$T/ix.f32" 50 &&
            ok "$f.gguf: the block's draft logits at 100 positions == glm_ref.py --mtp to 1e-5, same top-1" ||
            bad "$f.gguf: draft logits per position vs glm_ref.py"
        # the chain follows position 99: the main model's ties before it count
        if $PY - "$T/ix.f32" "$NL" <<'PYEOF'
import sys, numpy as np
ix = np.fromfile(sys.argv[1], dtype=np.float32).reshape(-1, int(sys.argv[2]), 2).astype(np.float64)
k, r = ix[:, :, 0], ix[:, :, 1]
sel = ~np.isnan(k)
tie = sel & ((k - r) <= 1e-5 * np.maximum(np.maximum(np.abs(k), np.abs(r)), 1e-30))
sys.exit(1 if tie.any() else 0)
PYEOF
        then
            $PY - "$T/$f.chain" "$T/$f.rchain" > "$T/$f.ccmp" 2>&1 <<'PYEOF'
import sys, numpy as np
a = np.fromfile(sys.argv[1], dtype=np.float32).reshape(-1, 4096).astype(np.float64)
b = np.fromfile(sys.argv[2], dtype=np.float32).reshape(-1, 4096).astype(np.float64)
assert a.shape == b.shape == (3, 4096), (a.shape, b.shape)
d = [float(np.linalg.norm(a[i] - b[i]) / np.linalg.norm(b[i])) for i in range(3)]
print("chain steps: rel L2 %s, top-1 %s / %s" % (" ".join("%.2e" % x for x in d),
      [int(x) for x in a.argmax(1)], [int(x) for x in b.argmax(1)]))
sys.exit(0 if max(d) <= 1e-5 and (a.argmax(1) == b.argmax(1)).all() else 1)
PYEOF
            r=$?
            sed 's/^/     /' "$T/$f.ccmp"
            [ $r = 0 ] && ok "$f.gguf: a chain of 3 drafts == glm_ref.py --mtp --mtp-drafts to 1e-5, same top-1" ||
                bad "$f.gguf: the draft chain vs glm_ref.py"
        else
            ok "$f.gguf: the chain not compared (an indexer near-tie in the main model's 100 positions)"
        fi
    else bad "glm_ref.py --mtp ($f.gguf):"; cat "$T/$f.rl"; fi
done

# --- 2. ds4 --mtp-draft: the output of plain decoding ---------------------------
run() { "$BD"/ds4 -m "$1" --tokens-file "$T/ids.txt" -n 60 --ctx 512 "${@:2}"; }
run "$M" --temp 0 > "$T/plain.out" 2> "$T/plain.err" || { bad "ds4 greedy"; tail -n 3 "$T/plain.err"; }
for d in 1 2 4; do
    if run "$M" --temp 0 --mtp-draft $d > "$T/d$d.out" 2> "$T/d$d.err" && [ -s "$T/plain.out" ] &&
            cmp -s "$T/plain.out" "$T/d$d.out"; then
        line=$(grep '^\[mtp:' "$T/d$d.err")
        if [ -n "$line" ]; then ok "ds4 --mtp-draft $d (greedy): output == plain decoding; $line"
        else bad "ds4 --mtp-draft $d: no acceptance line"; tail -n 3 "$T/d$d.err"; fi
    else bad "ds4 --mtp-draft $d (greedy): output differs"; tail -n 3 "$T/d$d.err"; fi
done
run "$M" --temp 1 --seed 7 --mtp-draft 2 > "$T/s1.out" 2> "$T/s1.err"
run "$M" --temp 1 --seed 7 --mtp-draft 2 > "$T/s2.out" 2> /dev/null
if [ -s "$T/s1.out" ] && cmp -s "$T/s1.out" "$T/s2.out" && grep -q '^\[mtp:' "$T/s1.err"; then
    ok "ds4 --mtp-draft 2 (--temp 1 --seed 7): sampled drafts, the same seed gives the same output"
else bad "ds4 --mtp-draft 2 sampled: not reproducible"; tail -n 3 "$T/s1.err"; fi

# --- 3. the block from a sidecar ------------------------------------------------
if $PY - "$T" "$ARCH" "$NL" > "$T/split.log" 2>&1 <<'PYEOF'
import os, sys
sys.path.insert(0, "tests")
import glm_gguf as G
out, arch, blk = sys.argv[1], sys.argv[2], "blk.%s." % sys.argv[3]
shape, writer = (G.GLM_DSA, G.write_glm_dsa) if arch == "glm-dsa" else (G.GLM5_NEXT, G.write_glm5_next)
tok, nv = G.tokenizer_kv(os.path.join(G.SHARED, "vocab", "mini-vocab.gguf"))
write = G.Writer.write
c = dict(shape, nextn=1)
# the trunk (the metadata still counts the NextN layer, llama.cpp's
# "trunk only") and the sidecar (blk.<n_layer>.* with the shared embedding,
# norm and head, as llama.cpp's --mtp export keeps them)
for name, keep in (("trunk", lambda n: not n.startswith(blk)),
                   ("side", lambda n: n.startswith(blk) or n in ("token_embd.weight", "output_norm.weight",
                                                                  "output.weight"))):
    G.Writer.write = lambda self, p, keep=keep: (setattr(self, "tensors", [t for t in self.tensors if keep(t[0])]),
                                                 write(self, p))
    writer(os.path.join(out, name + ".gguf"), c, tok, nv, 46)
# a misshapen block: eh_proj [E, E] instead of [2E, E], and no enorm
def bad(self, p):
    self.tensors = [(n, a[:, :64] if n == blk + "nextn.eh_proj.weight" else a) for n, a in self.tensors
                    if n != blk + "nextn.enorm.weight"]
    write(self, p)
G.Writer.write = bad
writer(os.path.join(out, "badside.gguf"), c, tok, nv, 46)
PYEOF
then
    if run "$T/trunk.gguf" --temp 0 --mtp "$T/side.gguf" --mtp-draft 2 > "$T/side.out" 2> "$T/side.err" &&
            cmp -s "$T/plain.out" "$T/side.out" &&
            [ "$(grep '^\[mtp:' "$T/side.err")" = "$(grep '^\[mtp:' "$T/d2.err")" ]; then
        ok "--mtp sidecar: the same output and drafts as the block inside the file"
    else bad "--mtp sidecar differs"; tail -n 3 "$T/side.err" "$T/d2.err"; fi
else bad "splitting the file:"; cat "$T/split.log"; fi

# --- 4. ds4-server and ds4-agent --------------------------------------------------
mkdir -p "$T/cases"
$PY tests/glm_vocab.py "$T/vocab.gguf" "$T/cases" > /dev/null 2>&1 &&
    $PY tests/glm_gguf.py "$ARCH" "$T/v.gguf" --vocab "$T/vocab.gguf" --set nextn=1 > /dev/null 2>&1 ||
    bad "glm_vocab.py / glm_gguf.py --vocab"
if ! server_start "$T/srv.log" "$BD"/ds4-server -m "$T/v.gguf" --port 0 --ctx 2048 -t 1 --mtp-draft 0; then
    bad "ds4-server did not start"; cat "$T/srv.log"
else
    for D in 0 2; do
        curl -s "$URL/v1/chat/completions" -H 'content-type: application/json' -d "{\"messages\": [{\"role\": \
\"user\", \"content\": \"one two three\"}], \"max_tokens\": 40, \"temperature\": 0, \"ds4_mtp_draft\": $D}" \
            > "$T/r$D.json"
    done
    if $PY -c 'import json,sys; a,b=(json.load(open(f))["choices"][0]["message"] for f in sys.argv[1:]); sys.exit(0 if a==b else 1)' \
            "$T/r0.json" "$T/r2.json" && curl -s "$URL/metrics" | grep -q '^ds4_spec_drafted_tokens_total [1-9]'; then
        ok "ds4-server: ds4_mtp_draft 2 (temperature 0) gives the plain answer; /metrics counts the drafts"
    else bad "ds4-server ds4_mtp_draft 2:"; head -c 400 "$T/r0.json" "$T/r2.json"; fi
    server_stop
fi
# the same working directory (it is in the agent's prompt), its own state
agent() {   # agent NAME ARGS: the model's own turns (noise), greedy
    mkdir -p "$T/aw" "$T/st$1"
    XDG_STATE_HOME="$T/st$1" "$BD"/ds4-agent -m "$T/v.gguf" --yes --nothink --ctx 4096 --max-tokens 16 \
        --dir "$T/aw" --temp 0 --trace "$T/$1.tr" -p "hi" "${@:2}" > "$T/$1.out" 2> "$T/$1.err"
    echo $? > "$T/$1.rc"
}
agent a0
agent a2 --mtp-draft 2
# the same answers (the terminal text, less the status lines) and turns
# (token counts); the drafts differ (the agent's prompt lookup runs in both)
text() { grep -av '^\[ctx\|^ds4-agent' "$1"; }
turns() { sed 's/,"drafted":[0-9]*,"accepted":[0-9]*,"session":"[^"]*"//' "$1"; }
if [ -s "$T/a0.tr" ] && [ -n "$(text "$T/a0.err")" ] && [ "$(text "$T/a0.err")" = "$(text "$T/a2.err")" ] &&
        cmp -s "$T/a0.rc" "$T/a2.rc" && [ "$(turns "$T/a0.tr")" = "$(turns "$T/a2.tr")" ] &&
        grep -q 'lookup+mtp' "$T/a2.err"; then
    ok "ds4-agent --mtp-draft 2 (--temp 0): the same turns and answers as without ($(wc -l < "$T/a0.tr") turns)"
else bad "ds4-agent --mtp-draft 2 differs (rc $(cat "$T/a0.rc") / $(cat "$T/a2.rc"))"; cat -v "$T/a0.tr" "$T/a2.tr" "$T/a0.err" "$T/a2.err" | tail -n 30; fi

# --- 5. refusals --------------------------------------------------------------------
expect_err() {   # expect_err NAME PATTERN -- command...
    local name="$1" pat="$2"; shift 3
    if "$@" > "$T/o" 2> "$T/e"; then bad "$name: accepted"
    elif grep -q -- "$pat" "$T/e"; then ok "$name"
    else bad "$name:"; cat "$T/e"; fi
}
expect_err "--mtp-draft on a $ARCH file without the block" "has no MTP block" -- \
    "$BD"/ds4 -m "$T/plain.gguf" --mtp-draft 2 --tokens 1,2 -n 2
expect_err "--mtp naming a file without the block" "no blk.$NL.\* tensors" -- \
    "$BD"/ds4 -m "$T/plain.gguf" --mtp "$T/plain.gguf" --tokens 1,2 -n 2
if [ -f "$T/badside.gguf" ]; then
    "$BD"/ds4 -m "$T/trunk.gguf" --mtp "$T/badside.gguf" --tokens 1,2 -n 2 > /dev/null 2> "$T/bad.err"
    if grep -q "missing tensor blk.$NL.nextn.enorm.weight" "$T/bad.err" &&
            grep -q "tensor blk.$NL.nextn.eh_proj.weight has dims \\[64, 64\\], expected \\[128, 64\\]" "$T/bad.err"; then
        ok "a misshapen NextN block: refused with every problem named"
    else bad "misshapen NextN block:"; cat "$T/bad.err"; fi
fi

# --inspect: the block (its nextn.* wiring and its decoder layer,
# blk.<n_layer>.*) is the MTP block's, not "tensors not used"
if "$BD"/ds4 -m "$M" --inspect > "$T/insp.txt" 2>&1 && grep -q "^  MTP block *$MTPN tensors" "$T/insp.txt" &&
        grep -q "^MTP block: $MTPN tensors, used for drafts" "$T/insp.txt" && ! grep -q "not used by ds4" "$T/insp.txt"; then
    ok "ds4 --inspect: the NextN block's $MTPN tensors as the MTP block, none unused"
else bad "ds4 --inspect on a $ARCH file with its NextN block:"; sed -n '/^weights by kind/,/^memory/p' "$T/insp.txt"; fi

[ $fail = 0 ] || { echo "$NAME: $fail failed"; exit 1; }
echo "$NAME: all passed"
