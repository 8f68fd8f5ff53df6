#!/usr/bin/env bash
# DS4_PROFILE (docs/PERF_KERNELS.md "The prefill step
# outside the matmuls"): the per-stage table of the forward passes.
#  - with DS4_PROFILE=1, ds4 prints the table on stderr at exit: every stage,
#    "other", the passes/rows header and the share outside the matmuls, the
#    stage times adding up to the total (other = total - stages); the
#    matmul stage by kind (dense, dense float, routed gate/up, routed down)
#    adding up to it, with its GFLOP, and the matmul threads' idle share;
#    the batched leaves by shape (no more time or GFLOP than the stage);
#  - decoding, the one-token products by weight format: per decoded token
#    exactly the bytes of the model's matrices of that format (the routed
#    experts' share n_used / n_expert), computed here from the GGUF; the
#    rows add up to "all" and GB/s is MB over wall;
#  - the logits are the same bits with and without it (timing only);
#  - without it (or with DS4_PROFILE=0) nothing is printed.
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"
S="${DS4_SHARED:-../shared}"
G="$S/golden"
PY=/usr/bin/python3
M="$G/models/tiny-a-q2.gguf"
SEQ="$G/sequences/seq_300.ids.txt"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail+1)); }

run() {   # run OUT.f32 ERR [env...]
    local o=$1 e=$2; shift 2
    env "$@" "$BD"/ds4 -q -m "$M" --tokens-file "$SEQ" --dump-logits "$o" -n 0 --chunk 64 -t 2 \
        > "$T/out.log" 2> "$e" || { bad "ds4 failed ($*)"; cat "$e"; return 1; }
}

run "$T/off.f32" "$T/off.err" DS4_PROFILE=
run "$T/on.f32" "$T/on.err" DS4_PROFILE=1
run "$T/zero.f32" "$T/zero.err" DS4_PROFILE=0

cmp -s "$T/off.f32" "$T/on.f32" && ok "logits identical with and without DS4_PROFILE" \
    || bad "DS4_PROFILE changed the logits"
grep -q "ds4 profile" "$T/off.err" && bad "profile printed without DS4_PROFILE" || ok "no table without DS4_PROFILE"
grep -q "ds4 profile" "$T/zero.err" && bad "profile printed with DS4_PROFILE=0" || ok "no table with DS4_PROFILE=0"

$PY - "$T/on.err" <<'PYEOF' > "$T/chk.log" 2>&1 && ok "table: $(cat "$T/chk.log")" || { bad "profile table"; cat "$T/chk.log"; cat "$T/on.err"; }
import re, sys
txt = open(sys.argv[1]).read()
m = re.search(r"ds4 profile \(DS4_PROFILE\): (\d+) passes, (\d+) rows, wall ([\d.]+) s, CPU ([\d.]+) s", txt)
assert m, "no header"
passes, rows, wall, cpu = int(m[1]), int(m[2]), float(m[3]), float(m[4])
# seq_300: 300 tokens in chunks of 64 -> 5 passes
assert passes == 5 and rows == 300, (passes, rows)
stages = ["matmul", "act quantize", "attention", "indexer", "compressor", "HC", "norm/rope",
          "router", "swiglu", "moe gather/scatter", "embed", "other"]
tw = tc = 0.0
for s in stages:
    r = re.search(r"^  " + re.escape(s) + r"\s+(-?[\d.]+)\s+(-?[\d.]+)%\s+(-?[\d.]+)\s+(-?[\d.]+)%$", txt, re.M)
    assert r, "no row " + s
    tw += float(r[1]); tc += float(r[3])
    if s != "other":
        assert float(r[1]) >= 0 and float(r[3]) >= 0, s
# every stage of this model runs: matmuls, attention and the HC must have taken time
for s in ["matmul", "attention", "HC", "swiglu"]:
    r = re.search(r"^  " + re.escape(s) + r"\s+([\d.]+)", txt, re.M)
    assert float(r[1]) > 0, s + " took no time"
assert abs(tw - wall) < 0.01 and abs(tc - cpu) < 0.01, (tw, wall, tc, cpu)
o = re.search(r"outside the matmuls: ([\d.]+)% of wall, ([\d.]+)% of CPU", txt)
assert o and 0 < float(o[1]) < 100 and 0 < float(o[2]) < 100
# the matmul stage by kind: the kinds add up to "all", which is the matmul
# stage; FLOPs counted as 2 * n_in * n_out per token row, so tiny-a's
# totals are known from its shapes (dense > 0, routed gate/up = 2 x down)
mm = re.search(r"^  matmul\s+([\d.]+)\s+[\d.]+%\s+([\d.]+)", txt, re.M)
kinds = {}
for k in ["dense", "dense float", "routed gate/up", "routed down", "all"]:
    r = re.search(r"^  " + re.escape(k) + r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", txt, re.M)
    assert r, "no matmul kind row " + k
    kinds[k] = [float(x) for x in r.groups()]
parts = ["dense", "dense float", "routed gate/up", "routed down"]
w = sum(kinds[k][0] for k in parts)
g = sum(kinds[k][1] for k in parts)
assert abs(w - kinds["all"][0]) < 0.005 and abs(kinds["all"][0] - float(mm[1])) < 0.002, (w, kinds["all"], mm[1])
assert abs(g - kinds["all"][1]) < 0.15 and abs(kinds["all"][3] - float(mm[2])) < 0.002, (g, kinds["all"], mm[2])
assert kinds["dense"][1] > 0 and kinds["routed down"][1] > 0, kinds
# the F16 HC mixing and compressor projections of tiny-a are float products
assert kinds["dense float"][1] > 0, kinds
assert abs(kinds["routed gate/up"][1] - 2 * kinds["routed down"][1]) <= 0.1 + 0.01 * kinds["routed down"][1], kinds
# batched leaves by shape (every leaf of these 44..64-token passes with
# more than 8 rows in some group): rows parse, GFLOP/s = GFLOP / wall, and
# they add up to no more than the matmul stage
assert re.search(r"^  batched matmul by shape\s+calls\s+tokens\s+wall s\s+GFLOP\s+GFLOP/s\s+GF/cpu-s\s+idle %$", txt, re.M), "no shape table"
shp = re.findall(r"^  ((?:F16|F32|BF16|Q8_0|Q2_K|Q4_K|IQ2_XXS|MXFP4|mixed) \d+x\d+(?: grp\d+)?)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)%$", txt, re.M)
assert shp, "no shape rows"
for name, calls, tok, sw, sg, sgs, scpu, sidle in shp:
    assert int(calls) > 0 and 8 < int(tok) <= 64, (name, calls, tok)
    assert 0 <= float(sidle) <= 100, (name, sidle)
    if float(sw) >= 0.002:   # within the printed precision of both
        lo = (float(sg) - 0.05) / (float(sw) + 0.0005)
        hi = (float(sg) + 0.05) / (float(sw) - 0.0005)
        assert lo - 0.05 <= float(sgs) <= hi + 0.05, (name, sw, sg, sgs)
# (each row rounded to the printed precision: half a unit each)
assert sum(float(x[4]) for x in shp) <= kinds["all"][1] + 0.05 * (len(shp) + 1), (shp, kinds["all"])
assert sum(float(x[3]) for x in shp) <= kinds["all"][0] + 0.0005 * (len(shp) + 1), (shp, kinds["all"])
idle = re.search(r"^  matmul thread idle: ([\d.]+)% of the parallel sections' thread time \(([\d.]+) of ([\d.]+) s\)$", txt, re.M)
assert idle and 0 <= float(idle[1]) <= 100 and float(idle[2]) <= float(idle[3]), "no idle line"
print(f"{passes} passes, {rows} rows, stages add up to the total, outside the matmuls {o[1]}% of wall; "
      f"matmul kinds add up ({kinds['all'][1]} GFLOP), thread idle {idle[1]}%")
PYEOF

# decoding: 4 and 8 greedy tokens; their difference is 4 one-token passes
for n in 4 8; do
    DS4_PROFILE=1 "$BD"/ds4 -q -m "$M" -p "Hello there" -n $n -t 2 --temp 0 > "$T/gen$n.log" 2> "$T/gen$n.err" \
        || { bad "ds4 -n $n failed"; cat "$T/gen$n.err"; }
done
$PY - "$T/gen4.err" "$T/gen8.err" "$S/oracle" "$M" <<'PYEOF' > "$T/tok.log" 2>&1 && ok "one-token table: $(cat "$T/tok.log")" || { bad "one-token table"; cat "$T/tok.log"; cat "$T/gen8.err"; }
import re, sys
sys.path.insert(0, sys.argv[3])
import gguf_reader as g
def table(path):
    txt = open(path).read()
    assert re.search(r"^  one-token by format\s+wall s\s+calls\s+MB\s+GB/s$", txt, re.M), "no one-token table"
    rows = {}
    for m in re.finditer(r"^  (F16|F32|BF16|Q8_0|Q2_K|Q4_K|IQ2_XXS|MXFP4|mixed|all)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)$", txt, re.M):
        rows[m[1]] = (float(m[2]), int(m[3]), float(m[4]), float(m[5]))
    assert "all" in rows, rows
    parts = [k for k in rows if k != "all"]
    a = rows["all"]
    assert abs(sum(rows[k][0] for k in parts) - a[0]) < 0.005, rows
    assert sum(rows[k][1] for k in parts) == a[1], rows
    assert abs(sum(rows[k][2] for k in parts) - a[2]) < 0.005 * len(parts), rows
    for k, (w, c, mb, gbs) in rows.items():
        if w >= 0.002:   # GB/s = MB / wall, within the printed precision of both
            lo, hi = (mb - 0.0005) / (w + 0.0005) / 1000, (mb + 0.0005) / (w - 0.0005) / 1000
            assert lo - 0.005 <= gbs <= hi + 0.005, (k, rows[k])
    return rows
t4, t8 = table(sys.argv[1]), table(sys.argv[2])
# expected MB per one-token pass, by format, from the GGUF: every matrix
# but the embedding table and tid2eid, the routed experts' n_used / n_expert
r = g.GGUFReader(sys.argv[4])
nu = [v for k, v in r.kv.items() if k.endswith(".expert_used_count")][0]
ne = [v for k, v in r.kv.items() if k.endswith(".expert_count")][0]
offs = sorted(r.tensors[n][2] for n in r.tensor_order)
end = r.size - r.data_offset
exp = {}
for n in r.tensor_order:
    shape, typ, off = r.tensors[n]
    if len(shape) < 2 or n == "token_embd.weight" or "tid2eid" in n: continue
    nb = min([o for o in offs if o > off] + [end]) - off
    if "_exps" in n: nb = nb * nu / ne
    exp[g.type_name(typ)] = exp.get(g.type_name(typ), 0) + nb / 1e6
got = {}
for k in ["Q8_0", "Q2_K", "IQ2_XXS"]:
    got[k] = (t8[k][2] - t4[k][2]) / 4
    assert abs(got[k] - exp[k]) <= 0.001, (k, got[k], exp[k])
    assert t8[k][1] > t4[k][1], (k, t4[k], t8[k])
# F16: the HC, router and compressor matrices (the position tables are not
# products, the indexer waits for enough compressed rows): some, not more
got["F16"] = (t8["F16"][2] - t4["F16"][2]) / 4
assert 0 < got["F16"] <= exp["F16"], (got["F16"], exp["F16"])
print(", ".join(f"{k} {got[k]:.3f} MB/token" for k in got) + " (the GGUF's bytes)")
PYEOF

echo "t_profile: $fail failure(s)"
[ "$fail" -eq 0 ]
