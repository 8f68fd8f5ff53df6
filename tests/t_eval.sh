#!/usr/bin/env bash
# ds4-eval end to end on a tiny model (the graders themselves are covered
# by build/tests/test_eval):
#  - a whole run with every answer scripted (right for most questions,
#    deliberately wrong for some): the report says pass/fail exactly as
#    planned, token counts are those of the rendered prompt and the
#    script, and two runs give identical reports;
#  - thinking budget: the soft cutoff closes the reasoning at the next line
#    end after N tokens, the hard one at M tokens;
#  - --nll equals the value computed from ds4 --dump-logits;
#  - the terminal view starts, answers 'q' and leaves a partial report;
#  - bad input: unknown ids, malformed script / NLL lines.
# ds4-test: optimized-only (the graders and the TUI read back scripted answers; ds4-eval's parsing runs under ASan in test_eval)
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin in the sanitizer pass)
S="${DS4_SHARED:-../shared}"
G="$S/golden"
PY=/usr/bin/python3
M="$G/models/tiny-a-f16.gguf"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail+1)); }

"$BD"/ds4-eval --list > "$T/list.tsv" || bad "--list"
n=$(wc -l < "$T/list.tsv")
[ "$n" -ge 60 ] && ok "--list: $n questions" || bad "--list: $n questions"

# the script: a reasoning, </think>, then the expected answer in the
# requested form; every 7th question gets a wrong answer
$PY - "$T/list.tsv" "$T/script.jsonl" "$T/plan.json" <<'PYEOF'
import json, sys
DSML = "\uff5cDSML\uff5c"
plan = {}
with open(sys.argv[2], "w") as out:
    for i, line in enumerate(open(sys.argv[1])):
        qid, topic, kind, expect, args = line.rstrip("\n").split("\t")[:5]
        wrong = i % 7 == 3
        if kind == "number":
            ans = "Answer: %s" % (str(float(expect) + 1) if wrong else expect)
        elif kind == "choice":
            ans = "Answer: %s" % ("F" if wrong else expect)
        elif kind == "regex":
            # a literal answer the expected regex accepts (see questions.c)
            lit = {"c07": "cba", "c08": "6 7", "l01": "Carol", "l02": "yes", "l05": "Saturday", "l08": "mixed fruit"}[qid]
            ans = "Answer: %s" % ("nothing" if wrong else lit)
        else:
            a = json.loads(args)
            if wrong:
                a[sorted(a)[0]] = "zzz"
            ps = "".join('<%sparameter name="%s" string="%s">%s</%sparameter>\n' % (
                DSML, k, "true" if isinstance(v, str) else "false", v if isinstance(v, str) else json.dumps(v), DSML)
                for k, v in a.items())
            ans = "\n\n<%stool_calls>\n<%sinvoke name=\"%s\">\n%s</%sinvoke>\n</%stool_calls>" % (
                DSML, DSML, expect, ps, DSML, DSML)
        out.write(json.dumps({"id": qid, "output": "Let me think.\nIt is simple.</think>" + ans}) + "\n")
        plan[qid] = not wrong
json.dump(plan, open(sys.argv[3], "w"))
PYEOF
"$BD"/ds4-eval -m "$M" --script "$T/script.jsonl" --report "$T/r1" --trace "$T/trace.jsonl" > "$T/out1.txt" 2>&1 \
    || { bad "scripted run"; tail "$T/out1.txt"; }
"$BD"/ds4-eval -m "$M" --script "$T/script.jsonl" --report "$T/r2" -t 1 > /dev/null 2>&1 || bad "second scripted run"
cmp -s "$T/r1.json" "$T/r2.json" && ok "scripted run: identical reports on two runs (threads differ)" || bad "scripted runs differ"
cmp -s "$T/r1.txt" "$T/r2.txt" && ok "scripted run: identical text reports" || bad "text reports differ"
$PY - "$T/r1.json" "$T/plan.json" "$T/script.jsonl" "$T/trace.jsonl" "$M" > "$T/c.log" 2>&1 <<'PYEOF' \
    && ok "scripted run: $(cat "$T/c.log")" || { bad "scripted run report"; cat "$T/c.log"; }
import json, os, subprocess, sys
rep = json.load(open(sys.argv[1])); plan = json.load(open(sys.argv[2]))
script = {json.loads(l)["id"]: json.loads(l)["output"] for l in open(sys.argv[3])}
trace = [json.loads(l) for l in open(sys.argv[4])]
assert rep["total"] == len(plan) == rep["run"] == len(trace)
for q in rep["questions"]:
    assert q["pass"] == plan[q["id"]], (q["id"], q["pass"], q["answer"], q["expected"])
assert rep["passed"] == sum(plan.values())
# token counts: the script's tokens (control tokens recognised) are what
# was generated; the prompt's are those of the rendered prompt in the trace
# (every 6th question: each check costs two ds4 runs; every kind is hit)
for i, (q, t) in enumerate(zip(rep["questions"], trace)):
    assert t["content"] == script[q["id"]].split("</think>", 1)[1], q["id"]
    assert t["reasoning"] == "Let me think.\nIt is simple.", t["reasoning"]
    assert q["think_cutoff"] == "none" and q["stop"] == "eos"
    if i % 6 and q["kind"] != "tool":
        continue
    ids = json.loads(subprocess.run([os.path.join(os.environ.get("DS4_BIN_DIR", "."), "ds4"), "-m", sys.argv[5], "--tokenize", "--special", "--prompt-file", "/dev/stdin"],
                     input=script[q["id"]].encode(), capture_output=True, check=True).stdout)
    assert q["generated_tokens"] == len(ids), (q["id"], q["generated_tokens"], len(ids))
    pids = json.loads(subprocess.run([os.path.join(os.environ.get("DS4_BIN_DIR", "."), "ds4"), "-m", sys.argv[5], "--tokenize", "--special", "--prompt-file", "/dev/stdin"],
                      input=t["prompt"].encode(), capture_output=True, check=True).stdout)
    assert q["prompt_tokens"] == len(pids), q["id"]
print("%d/%d passed as planned, token counts and trace match" % (rep["passed"], rep["total"]))
PYEOF
grep -q "^total      $($PY -c "import json;p=json.load(open('$T/plan.json'));print('%d/%d' % (sum(p.values()), len(p)))") passed" "$T/r1.txt" \
    && ok "text report totals" || { bad "text report"; tail -3 "$T/r1.txt"; }
grep -q "^t01  tools      tool   pass" "$T/r1.txt" && ok "text report: one line per question" || bad "text report lines"

# --- thinking budget --------------------------------------------------------
printf '%s\n' '{"id": "a01", "output": "one two three four five six\nseven eight\nnine</think>Answer: 391"}' > "$T/soft.jsonl"
"$BD"/ds4-eval -m "$M" --ids a01 --script "$T/soft.jsonl" --think-soft 3 --think-hard 100 --report "$T/s" > /dev/null 2>&1
$PY - "$T/s.json" "$M" <<'PYEOF' && ok "--think-soft 3: reasoning closed at the first line end after 3 tokens" || bad "--think-soft"
import json, os, subprocess, sys
q = json.load(open(sys.argv[1]))["questions"][0]
n = len(json.loads(subprocess.run([os.path.join(os.environ.get("DS4_BIN_DIR", "."), "ds4"), "-m", sys.argv[2], "--tokenize", "one two three four five six\n"],
        capture_output=True, check=True).stdout))
assert q["think_cutoff"] == "soft" and q["reasoning_tokens"] == n and q["pass"], (q, n)
PYEOF
printf '%s\n' '{"id": "a01", "output": "one two three four five six seven eight nine</think>Answer: 391"}' > "$T/hard.jsonl"
"$BD"/ds4-eval -m "$M" --ids a01 --script "$T/hard.jsonl" --think-soft 2 --think-hard 4 --report "$T/h" > /dev/null 2>&1
$PY -c "
import json; q = json.load(open('$T/h.json'))['questions'][0]
assert q['think_cutoff'] == 'hard' and q['reasoning_tokens'] == 4 and q['pass'], q" \
    && ok "--think-hard 4: </think> forced at 4 reasoning tokens, the answer still graded" || bad "--think-hard"
"$BD"/ds4-eval -m "$M" --ids a01,f01 --nothink --think-hard 0 -n 6 --report "$T/g" > /dev/null 2>&1
$PY -c "
import json; r = json.load(open('$T/g.json'))
assert r['think'] == 'none' and [q['id'] for q in r['questions']] == ['a01', 'f01']
for q in r['questions']: assert q['reasoning_tokens'] == 0 and 0 < q['answer_tokens'] <= 6 and q['stop'] in ('eos', 'length'), q" \
    && ok "sampled run: --nothink, --ids, -n bound the answer" || bad "sampled run"

# --- NLL ----------------------------------------------------------------------
cat > "$T/nll.jsonl" <<'JEOF'
{"prompt": "<｜begin▁of▁sentence｜>The capital of France is", "continuation": " Paris, a city on the Seine."}
{"prompt": "<｜begin▁of▁sentence｜>def add(a, b):", "continuation": "\n    return a + b\n"}

{"prompt": "x", "continuation": "y"}
JEOF
"$BD"/ds4-eval -m "$M" --nll "$T/nll.jsonl" > "$T/nll.out" 2>&1 || { bad "--nll run"; cat "$T/nll.out"; }
$PY - "$T/nll.jsonl" "$T/nll.out" "$M" <<'PYEOF' > "$T/c.log" 2>&1 && ok "--nll = NLL from --dump-logits ($(cat "$T/c.log"))" || { bad "--nll"; cat "$T/c.log"; }
import json, subprocess, sys, tempfile, os
import numpy as np
m = sys.argv[3]
pairs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out = [json.loads(l) for l in open(sys.argv[2])]
assert len(out) == len(pairs) + 1
tok = lambda s: json.loads(subprocess.run([os.path.join(os.environ.get("DS4_BIN_DIR", "."), "ds4"), "-m", m, "--tokenize", "--special", "--prompt-file", "/dev/stdin"],
                           input=s.encode(), capture_output=True, check=True).stdout)
tot = 0.0; nt = 0; worst = 0.0
for p, o in zip(pairs, out):
    pt, ct = tok(p["prompt"]), tok(p["continuation"])
    ids = pt + ct
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([os.path.join(os.environ.get("DS4_BIN_DIR", "."), "ds4"), "-q", "-m", m, "--tokens", ",".join(map(str, ids)), "-n", "0",
                        "--dump-logits", d + "/l.f32"], check=True, capture_output=True)
        lg = np.fromfile(d + "/l.f32", "<f4").reshape(len(ids), -1).astype(np.float64)
    nll = 0.0
    for i, t in enumerate(ct):
        r = lg[len(pt) - 1 + i]
        mx = r.max()
        nll -= r[t] - (mx + np.log(np.exp(r - mx).sum()))
    assert o["tokens"] == len(ct) and o["prompt_tokens"] == len(pt), o
    worst = max(worst, abs(o["nll"] - nll) / max(1.0, abs(nll)))
    tot += nll; nt += len(ct)
assert abs(out[-1]["nll_per_token"] - tot / nt) <= 1e-6 * max(1, tot / nt), (out[-1], tot / nt)
assert out[-1]["tokens"] == nt and out[-1]["pairs"] == len(pairs)
print("%d pairs, %.4f nats/token, worst rel. diff %.1e" % (len(pairs), tot / nt, worst))
sys.exit(0 if worst <= 1e-6 else 1)
PYEOF
echo '{"prompt": "a"}' > "$T/bad.jsonl"
"$BD"/ds4-eval -m "$M" --nll "$T/bad.jsonl" > "$T/e.txt" 2>&1 && bad "--nll accepted a line without continuation" \
    || { grep -q 'bad.jsonl:1: expected a JSON object' "$T/e.txt" && ok "--nll: malformed line, clear error" || bad "--nll error: $(cat "$T/e.txt")"; }

# --- terminal view -------------------------------------------------------------
# under a pseudo-terminal: 'q' after the first screens ends the run early
(sleep 1; printf q) | timeout 60 script -qec "$BD/ds4-eval -m $M --think-hard 64 --think-soft 32 -n 64 --report $T/tui" /dev/null > "$T/tui.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q $'\033\[?1049h' "$T/tui.out" && grep -q "ds4-eval" "$T/tui.out" \
   && $PY -c "import json,sys; r=json.load(open('$T/tui.json')); sys.exit(0 if r['run'] < r['total'] else 1)"; then
    ok "terminal view: full screen on a tty, 'q' quits with a partial report"
else
    bad "terminal view (rc $rc)"; tail -c 400 "$T/tui.out" | cat -v
fi
"$BD"/ds4-eval -m "$M" --ids a01 -n 2 --think-hard 2 --think-soft 1 < /dev/null | grep -q $'\033' \
    && bad "escape codes when stdout is not a terminal" || ok "plain output when not a terminal"

# --- bad input -------------------------------------------------------------------
"$BD"/ds4-eval -m "$M" --ids a01,zz9 > "$T/e.txt" 2>&1 && bad "unknown id accepted" \
    || { grep -q "no question 'zz9'" "$T/e.txt" && ok "--ids: unknown id, clear error" || bad "--ids error: $(cat "$T/e.txt")"; }
echo 'not json' > "$T/bad.jsonl"
"$BD"/ds4-eval -m "$M" --script "$T/bad.jsonl" > "$T/e.txt" 2>&1 && bad "bad script accepted" \
    || { grep -q "bad.jsonl:1: expected" "$T/e.txt" && ok "--script: malformed line, clear error" || bad "--script error: $(cat "$T/e.txt")"; }
"$BD"/ds4-eval -m "$M" --think-soft 10 --think-hard 5 > "$T/e.txt" 2>&1 && bad "soft > hard accepted" || ok "--think-soft above --think-hard refused"
"$BD"/ds4-eval -m "$M" --ids a01 --script "$T/hard.jsonl" --think-hard 3 --report "$T/h3" > /dev/null 2>&1 \
    && $PY -c "
import json; q = json.load(open('$T/h3.json'))['questions'][0]; r = json.load(open('$T/h3.json'))
assert r['think_soft'] == 3 and q['reasoning_tokens'] == 3, (r['think_soft'], q)" \
    && ok "a lone --think-hard below the default soft budget lowers it" || bad "--think-hard 3 alone"

echo "t_eval: $fail failure(s)"
[ "$fail" -eq 0 ]
