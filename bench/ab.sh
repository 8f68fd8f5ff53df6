#!/usr/bin/env bash
# bench/ab.sh -- this tree's ds4-bench against another revision's, side by
# side on the same machine, model and run (`make bench-ab AB_REV=REV`).
#
#   bench/ab.sh REV
#
# Builds REV's ds4-bench in a scratch worktree (build/ab/REV, ignored by
# git, reused when it exists), then alternates the two binaries
# (A = REV, B = this tree's ./ds4-bench) for AB_ROUNDS rounds on the bench
# model (bench/model.sh: $BENCH_MODEL, ./ds4flash.gguf or the synthetic
# medium q2), prefilling bench/data/italian_sample.txt to the frontiers
# AB_CTX_START .. AB_CTX_MAX (x2) and decoding 16 greedy tokens at each.
# Alternating rounds share the machine's drift (load, page cache, clock),
# so the medians' ratio B/A is what to read; the load average before and
# after is printed beside it.
#
# Settings: AB_ROUNDS (5), AB_CTX_START (512), AB_CTX_MAX (2048),
# AB_THREADS (0 = all cores).  Output: a table on stdout, the raw CSVs in
# build/ab/results/.
set -eu
cd "$(dirname "$0")/.."
REV=${1:-${AB_REV:-}}
[ -n "$REV" ] || { echo "usage: bench/ab.sh REV (a commit, tag or branch to compare with)" >&2; exit 2; }
ROUNDS=${AB_ROUNDS:-5}
CTX_START=${AB_CTX_START:-512}
CTX_MAX=${AB_CTX_MAX:-2048}
THREADS=${AB_THREADS:-0}
SHARED=${DS4_SHARED:-../shared}
say() { echo "bench-ab: $*"; }
die() { echo "bench-ab: error: $*" >&2; exit 1; }

[ -x ./ds4-bench ] && [ -x ./ds4-synth ] || die "build first (make)"
sha=$(git rev-parse --verify --quiet "$REV^{commit}") || die "$REV is not a revision of this repository"
short=$(git rev-parse --short "$sha")
WT=build/ab/$short
if [ ! -x "$WT/ds4-bench" ]; then
    say "building $REV ($short)'s ds4-bench in $WT"
    mkdir -p build/ab
    [ -d "$WT" ] || git worktree add --detach "$WT" "$sha" > /dev/null
    make -C "$WT" -j"$(nproc)" ds4-bench > "$WT.build.log" 2>&1 || die "building $REV failed: $WT.build.log"
fi

. bench/model.sh
bench_model
OUT=build/ab/results
mkdir -p "$OUT"
rm -f "$OUT"/*.csv
cat "$MODEL" > /dev/null   # the file in the page cache before either side runs
say "A = $REV ($short), B = this tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src cli server agent tools || echo ', modified')), $ROUNDS alternating rounds"
say "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
    for side in A B; do
        bin=./ds4-bench
        [ "$side" = A ] && bin=$WT/ds4-bench
        "$bin" -m "$MODEL" --prompt-file bench/data/italian_sample.txt --ctx-start "$CTX_START" \
            --ctx-max "$CTX_MAX" --gen-tokens 16 -t "$THREADS" --no-probe 2> "$OUT/$side.$r.err" \
            > "$OUT/$side.$r.csv" || die "$side round $r failed: $OUT/$side.$r.err"
    done
done
say "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$OUT" "$ROUNDS" <<'PY'
import csv, statistics as st, sys
d, R = sys.argv[1], int(sys.argv[2])
rows = {}
for side in "AB":
    for r in range(1, R + 1):
        lines = [l for l in open(f"{d}/{side}.{r}.csv") if l[:1].isdigit() or l.startswith("ctx,")]
        for row in csv.DictReader(lines):
            rows.setdefault((side, int(row["ctx"])), []).append((float(row["prefill_tps"]), float(row["decode_tps"])))
print("  ctx  prefill A  prefill B    B/A   decode A  decode B    B/A   (tok/s, medians)")
for c in sorted({k[1] for k in rows}):
    a, b = rows[("A", c)], rows[("B", c)]
    pa, pb = st.median(x[0] for x in a), st.median(x[0] for x in b)
    da, db = st.median(x[1] for x in a), st.median(x[1] for x in b)
    print(f"{c:5d} {pa:10.1f} {pb:10.1f} {pb / pa:6.3f} {da:10.2f} {db:9.2f} {db / da:6.3f}")
PY
