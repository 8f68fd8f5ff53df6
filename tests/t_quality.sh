#!/usr/bin/env bash
# Quality tools (docs/quality.md: "Validating a model", "Evaluating a model",
# "Debugging a bad answer", "Steering"):
#  - ds4 --dump-tokens: the rendered prompt, one token a line;
#  - ds4 --dump-logprobs: top-K equals the log-softmax of the golden
#    reference logits (tiny models, --no-qat) and of the run's own
#    --dump-logits; generation steps carry the sampled token;
#  - the official-vector checker on a synthetic case (a fake "official" file
#    made from a tiny model's own output) and on perturbed fakes that must fail.
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin in the sanitizer pass)
S="${DS4_SHARED:-../shared}"
G="$S/golden"
PY=/usr/bin/python3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
M="$G/models/tiny-a-f16.gguf"

# --- --dump-tokens --------------------------------------------------------
"$BD"/ds4 -m vocab/deepseek-v4-vocab.gguf --nothink --dump-tokens \
    -p 'Rispondi in italiano con una frase: chi era Ada Lovelace?' > "$T/dt.txt" 2>&1
# 21 = the official API's usage.prompt_tokens for this message
n=$(wc -l < "$T/dt.txt")
[ "$n" -eq 21 ] && ok "--dump-tokens: 21 tokens for the official short_italian_fact prompt" \
    || { bad "--dump-tokens: $n tokens, expected 21"; cat "$T/dt.txt"; }
printf '0\t0\t<｜begin▁of▁sentence｜>\n' > "$T/first"
head -1 "$T/dt.txt" | cmp -s - "$T/first" && ok "--dump-tokens: line format" || bad "--dump-tokens: first line $(head -1 "$T/dt.txt")"
tail -1 "$T/dt.txt" | grep -qP '^20\t128822\t</think>$' && ok "--dump-tokens: non-thinking assistant opening" \
    || bad "--dump-tokens: last line $(tail -1 "$T/dt.txt")"
ids=$("$BD"/ds4 -m vocab/deepseek-v4-vocab.gguf --tokenize $'a\\b\n\tc' | tr -d '[] ')
"$BD"/ds4 -m vocab/deepseek-v4-vocab.gguf --dump-tokens --tokens "$ids" | cut -f3 > "$T/dt2.txt"
printf 'a\n\\\\\nb\n\\n\n\\tc\n' > "$T/dt2.want"
cmp -s "$T/dt2.txt" "$T/dt2.want" && ok "--dump-tokens --tokens: bytes escaped (\\\\ \\n \\t)" || { bad "--dump-tokens --tokens"; cat -A "$T/dt2.txt"; }
"$BD"/ds4 -m vocab/deepseek-v4-vocab.gguf --dump-tokens > "$T/e.txt" 2>&1 && bad "--dump-tokens without a prompt accepted" \
    || { grep -q "needs -p" "$T/e.txt" && ok "--dump-tokens without a prompt: clear error" || bad "--dump-tokens error: $(cat "$T/e.txt")"; }

# --- --dump-logprobs vs the golden logits ----------------------------------
for m in f16 q2; do
  for s in seq_040 seq_300; do
    "$BD"/ds4 -q -m "$G/models/tiny-a-$m.gguf" --no-qat --tokens-file "$G/sequences/$s.ids.txt" -n 0 \
        --dump-logprobs "$T/lp.json" --logprobs-top-k 20 --dump-logits "$T/lg.f32" > "$T/run.log" 2>&1 \
        || { bad "$m $s: ds4 failed"; cat "$T/run.log"; continue; }
    if $PY - "$G/tiny-a-$m" "$s" "$G/sequences/$s.ids.txt" "$T/lp.json" "$T/lg.f32" > "$T/c.log" 2>&1 <<'PYEOF'
import json, sys, os
import numpy as np
gdir, seq, idsf, lpf, lgf = sys.argv[1:]
man = json.load(open(os.path.join(gdir, "manifest.json")))
V = man["n_vocab"]
ent = man["sources"]["ref-noqat"]["sequences"][seq]
d = os.path.join(gdir, "ref-noqat")
fp = ent["full_positions"]
full = np.fromfile(os.path.join(d, seq + ".full.f32"), "<f4").reshape(len(fp), V).astype(np.float64)
ids = [int(x) for x in open(idsf).read().split()]
steps = json.load(open(lpf))["steps"]
own = np.fromfile(lgf, "<f4").reshape(-1, V).astype(np.float64)
assert len(steps) == len(ids) == len(own), (len(steps), len(ids), len(own))
def logsoftmax(r):
    m = r.max(); return r - (m + np.log(np.exp(r - m).sum()))
worst_g = worst_o = 0.0
checked = 0
for k, p in enumerate(fp):
    st = steps[p]
    g = logsoftmax(full[k]); o = logsoftmax(own[p])
    top = st["top"]
    assert len(top) == 20
    lps = [t["logprob"] for t in top]
    assert all(a >= b for a, b in zip(lps, lps[1:])), "top not sorted"
    # every listed id: its golden logprob; nothing golden-better is missing
    for t in top:
        worst_g = max(worst_g, abs(t["logprob"] - g[t["id"]]))
        worst_o = max(worst_o, abs(t["logprob"] - o[t["id"]]))
        assert bytes(t["bytes"]) == bytes(t["bytes"])
    listed = {t["id"] for t in top}
    for i in np.argsort(-g, kind="stable")[:20]:
        assert i in listed or g[i] <= lps[-1] + 2e-3, "golden top id %d missing at %d" % (i, p)
    # the own logits: the exact top-20 set (ties broken by id)
    want = sorted(range(V), key=lambda i: (-own[p][i], i))[:20]
    assert [t["id"] for t in top] == want, "top ids differ from own logits at %d" % p
    if p + 1 < len(ids):
        assert st["id"] == ids[p + 1]
        worst_g = max(worst_g, abs(st["logprob"] - g[ids[p + 1]]))
        worst_o = max(worst_o, abs(st["logprob"] - o[ids[p + 1]]))
    else:
        assert "id" not in st and "logprob" not in st
    checked += 1
print("positions %d  max |lp - golden| %.2e  max |lp - own logits| %.2e" % (checked, worst_g, worst_o))
# tolerance as for logits (--check noqat: rel. L2 5e-5 of rows of norm ~
# tens gives absolute errors ~1e-3 at worst); own logits: float64 rounding
sys.exit(0 if worst_g <= 2e-3 and worst_o <= 1e-6 else 1)
PYEOF
    then ok "--dump-logprobs $m $s = log-softmax of golden logits ($(cat "$T/c.log"))"
    else bad "--dump-logprobs $m $s"; sed 's/^/    /' "$T/c.log"; fi
  done
done

# generation: one step per sampled token, the step's id is what was printed
"$BD"/ds4 -q -m "$M" --tokens 1,2,3,4 -n 5 --temp 0 --dump-logprobs "$T/g.json" --logprobs-top-k 3 > "$T/g.out" 2>&1
$PY - "$T/g.json" "$T/g.out" > "$T/c.log" 2>&1 <<'PYEOF' && ok "--dump-logprobs generation: 5 greedy steps, bytes = output" || { bad "--dump-logprobs generation"; cat "$T/c.log"; }
import json, sys
st = json.load(open(sys.argv[1]))["steps"]
out = open(sys.argv[2], "rb").read()
assert len(st) == 5, len(st)
for s in st:
    assert s["id"] == s["top"][0]["id"] and s["logprob"] == s["top"][0]["logprob"], s
    assert len(s["top"]) == 3
assert out == b"".join(bytes(s["bytes"]) for s in st) + b"\n", (out,)
PYEOF
"$BD"/ds4 -q -m "$M" --dump-logprobs "$T/x.json" --kv-disk-dir "$T/kv" -p hi > "$T/e.txt" 2>&1 \
    && bad "--dump-logprobs with --kv-disk-dir accepted" || ok "--dump-logprobs with --kv-disk-dir refused"

# --- official-vector checker on synthetic cases -----------------------------
C="$PY tools/quality/check_logprobs.py"
P='Rispondi in italiano con una frase: chi era Ada Lovelace?'
"$BD"/ds4 -q -m "$M" --nothink --temp 0 -n 4 -p "$P" --dump-logprobs "$T/loc.json" --logprobs-top-k 20 > /dev/null 2>&1 \
    || bad "tiny model greedy run"
np=$("$BD"/ds4 -m "$M" --nothink --dump-tokens -p "$P" | wc -l)
$PY - "$T/loc.json" "$T" "$np" <<'PYEOF'
import json, sys, copy
loc = json.load(open(sys.argv[1])); out = sys.argv[2]; n = int(sys.argv[3])
def tok(t): return {"text": bytes(t["bytes"]).decode("utf-8", "replace"), "bytes": t["bytes"]}
# like the API at temperature 0: chosen token 0.0, alternatives clamped;
# here the tiny model's own values stand in (a fake built from its output)
steps = [{"step": i, "token": tok(s), "logprob": s["logprob"],
          "top_logprobs": [{"token": tok(t), "logprob": t["logprob"] if j < 5 else -9999.0}
                           for j, t in enumerate(s["top"])]} for i, s in enumerate(loc["steps"])]
fake = {"schema": "ds4-official-logprobs-v1", "id": "synthetic", "usage": {"prompt_tokens": n}, "steps": steps}
json.dump(fake, open(out + "/fake.json", "w"))
f = copy.deepcopy(fake)                          # every value 1 nat off
for st in f["steps"]:
    for t in st["top_logprobs"]:
        if t["logprob"] > -9000: t["logprob"] -= 1.0
json.dump(f, open(out + "/fake_lp.json", "w"))
f = copy.deepcopy(fake); f["steps"][2]["token"]["bytes"] = [65, 66]         # another greedy token
json.dump(f, open(out + "/fake_tok.json", "w"))
f = copy.deepcopy(fake); f["usage"]["prompt_tokens"] = n + 1                 # a template difference
json.dump(f, open(out + "/fake_n.json", "w"))
PYEOF
$C "$T/fake.json" "$T/loc.json" --prompt-tokens "$np" --mad-max 1e-6 > "$T/c.log" 2>&1 \
    && grep -q "mean absolute difference: 0.0000" "$T/c.log" && ok "checker: a fake official file from the model's own output passes (mad 0)" \
    || { bad "checker on its own output"; cat "$T/c.log"; }
for k in lp tok n; do
    if $C "$T/fake_$k.json" "$T/loc.json" --prompt-tokens "$np" > "$T/c.log" 2>&1; then
        bad "checker: perturbed fake ($k) passed"; cat "$T/c.log"
    else
        ok "checker: perturbed fake ($k) fails: $(grep -o 'FAIL.*' "$T/c.log" | cut -c1-100)"
    fi
done
echo '{"steps": 3}' > "$T/broken.json"
$C "$T/broken.json" "$T/loc.json" --prompt-tokens 1 > "$T/c.log" 2>&1 \
    && bad "checker accepted a malformed file" || { grep -q "malformed" "$T/c.log" && ok "checker: malformed file, clear error" || { bad "checker malformed: $(cat "$T/c.log")"; }; }

echo "t_quality: $fail failure(s)"
[ "$fail" -eq 0 ]
