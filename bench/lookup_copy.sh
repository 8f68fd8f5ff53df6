#!/usr/bin/env bash
# bench/lookup_copy.sh -- end-to-end decode speed of a copy-heavy coding
# turn with prompt-lookup drafts (ds4-agent --lookup 4) against plain
# decoding (--lookup 0), interleaved in one run (docs/cli.md "Speculative
# decoding").
#
#   bench/lookup_copy.sh [MODEL] [ROUNDS]
#
# The task: the agent reads a source file (turn 1, a `read` call; the first
# LOOKUP_LINES = 60 lines of src/engine/sampler.c), then rewrites it with
# a few words changed (turn 2, a `write` call whose
# content is the file again) and answers (turn 3).  The model's text is
# forced with --script, so the *acceptance* is that of a model that copies
# the file faithfully -- which is what the real model does in such a turn,
# and what a random-weight model never does -- while every pass and every
# decode step is the real forward pass on MODEL.  Turn 2's decode speed is
# the figure: plain vs drafts, medians over ROUNDS (default 3), plus the
# drafts kept.  The outputs of both are checked to be identical.
set -u
cd "$(dirname "$0")/.."
MODEL="${1:-${BENCH_MODEL:-./ds4flash.gguf}}"
ROUNDS="${2:-3}"
[ -f "$MODEL" ] || { echo "lookup_copy: no model $MODEL (bench/run.sh makes bench/models/medium-q2.gguf)" >&2; exit 2; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export XDG_STATE_HOME="$T/state"   # the agent's sessions: not in the user's state directory
D='｜DSML｜'
LINES="${LOOKUP_LINES:-60}"       # lines of src/engine/sampler.c the task copies
SRC="$T/sampler.c"
head -n "$LINES" src/engine/sampler.c > "$SRC"
NEW=$(sed 's/ds4_sample_greedy/ds4_sample_argmax/g; s/sampler/token sampler/' "$SRC")
{
    printf 'Read the file first.'
    printf '\n\n<%stool_calls>\n<%sinvoke name="read">\n<%sparameter name="path" string="true">sampler.c</%sparameter>\n</%sinvoke>\n</%stool_calls>' "$D" "$D" "$D" "$D" "$D" "$D"
    printf '\n---\n'
    printf 'Rename the function and write the file back.'
    printf '\n\n<%stool_calls>\n<%sinvoke name="write">\n<%sparameter name="path" string="true">sampler.c</%sparameter>\n<%sparameter name="content" string="true">%s\n</%sparameter>\n</%sinvoke>\n</%stool_calls>' "$D" "$D" "$D" "$D" "$D" "$NEW" "$D" "$D" "$D"
    printf '\n---\n'
    printf 'Renamed ds4_sample_greedy to ds4_sample_argmax in sampler.c.'
} > "$T/script"
echo "lookup_copy: model $MODEL, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $ROUNDS rounds" >&2
for r in $(seq 1 "$ROUNDS"); do
    for l in 0 4; do
        rm -rf "$T/run"; mkdir -p "$T/run"; cp "$SRC" "$T/run/sampler.c"
        ./ds4-agent -m "$MODEL" --ctx 16384 --nothink --yes --lookup $l --dir "$T/run" \
            --script "$T/script" --trace "$T/tr.$l.$r" -p "rename" > "$T/out.$l.$r" 2> "$T/err.$l.$r" \
            || { echo "lookup_copy: ds4-agent failed:"; tail -5 "$T/err.$l.$r"; exit 1; } >&2
        cp "$T/run/sampler.c" "$T/file.$l.$r"
        # turn 2's status line: "decode N tok, X tok/s"
        grep -o 'decode [0-9]* tok, [0-9.]* tok/s' "$T/err.$l.$r" | sed -n 2p | awk -v l=$l -v r=$r '{print l, r, $2, $4}' >> "$T/speeds"
    done
    cmp -s "$T/out.0.$r" "$T/out.4.$r" && cmp -s "$T/file.0.$r" "$T/file.4.$r" \
        || { echo "lookup_copy: outputs differ with drafts" >&2; exit 1; }
done
/usr/bin/python3 - "$T" "$ROUNDS" <<'PY'
import json, statistics, sys
T, R = sys.argv[1], int(sys.argv[2])
sp = {}
for line in open(T + "/speeds"):
    l, r, n, tps = line.split()
    sp.setdefault(l, []).append(float(tps))
    ntok = int(n)
j = [json.loads(x) for x in open(T + "/tr.4.1")][1]
p, q = statistics.median(sp["0"]), statistics.median(sp["4"])
print("turn 2 (write of the copied file): %d tokens decoded" % ntok)
print("plain decoding     : %.2f tok/s (median of %d: %s)" % (p, R, " ".join("%.2f" % v for v in sp["0"])))
print("--lookup 4 drafts  : %.2f tok/s (median of %d: %s)" % (q, R, " ".join("%.2f" % v for v in sp["4"])))
print("drafts kept        : %d of %d (%.1f %%)" % (j["accepted"], j["drafted"], 100.0 * j["accepted"] / max(1, j["drafted"])))
print("speed-up           : %.2fx" % (q / p))
PY
