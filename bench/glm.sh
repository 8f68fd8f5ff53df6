#!/usr/bin/env bash
# bench/glm.sh -- `make bench-glm`: ds4 and llama.cpp (its own glm-dsa
# implementation, the release of node-llama-cpp@3.22.1) on the same glm-dsa
# GGUF, same machine, same threads, alternating rounds; medians and ratios.
#
#   1. llama.cpp: bench/llamacpp/setup.sh (its prebuilt CPU libraries and
#      bench/llamacpp/llama_logits; no server).
#   2. the model: $GLM_MODEL, else bench/models/glm52-L$GLM_LAYERS-q8_0.gguf
#      made once by `ds4-synth --arch glm-dsa --preset glm52` (the real GLM
#      5.2 per-layer shape: n_embd 6144, 64 heads, MLA over 576-wide rows,
#      the DSA indexer with top-k 2048, 256 experts x 2048 top-8 from layer
#      3; the first GLM_LAYERS layers, q8_0, RANDOM weights: ~12.5 GB at 4).
#   3. for each round and prefill size: ds4-bench (one frontier: a fresh
#      prefill of N tokens, then D greedy tokens) and llama_logits bench (a
#      fresh context with llama.cpp's defaults, N tokens, then D greedy
#      tokens), the order alternating between rounds; peak RSS of each.
#   4. a table: per measurement the median of each engine and ds4/llama.cpp.
#
# Settings (environment or make variables):
#   GLM_MODEL        model file (see 2.)
#   GLM_LAYERS       layers of the synthetic model (default 4: 3 dense + 1 MoE)
#   GLM_PREFILL      prefill sizes (default "1024 2560": the second past the
#                    indexer's top-k, so that it selects)
#   GLM_DECODE       decoded tokens per run (default 16)
#   GLM_ROUNDS       rounds (default 3)
#   GLM_THREADS      threads of both engines (default: all CPUs)
#   GLM_REPACK       1 (default) = llama.cpp's default weight repacking (its
#                    CPU "extra buffer": a repacked copy of the Q8_0
#                    matrices in memory); 0 = --no-repack
#   GLM_OUT          results directory (default bench/results)
# llama.cpp otherwise runs with its defaults (F16 KV cache, flash attention
# auto, n_batch 2048, n_ubatch 512); ds4 with its own (prefill chunk 2048).
set -eu
cd "$(dirname "$0")/.."
PREFILL=${GLM_PREFILL:-1024 2560}
DECODE=${GLM_DECODE:-16}
ROUNDS=${GLM_ROUNDS:-3}
THREADS=${GLM_THREADS:-$(nproc)}
LAYERS=${GLM_LAYERS:-4}
REPACK=${GLM_REPACK:-1}
OUT=${GLM_OUT:-bench/results}
TEXT=bench/data/italian_sample.txt
say() { echo "bench-glm: $*" >&2; }
die() { echo "bench-glm: error: $*" >&2; exit 1; }
for b in ds4-bench ds4-synth; do
    [ -x "./$b" ] || die "./$b is missing: run \`make\` first"
done

# --- 1. llama.cpp -------------------------------------------------------------
ENV=$(bench/llamacpp/setup.sh) || die "bench/llamacpp/setup.sh failed (above)"
eval "$ENV"
export GGML_BACKEND_DIR

# --- 2. the model ---------------------------------------------------------------
if [ -n "${GLM_MODEL:-}" ]; then
    MODEL=$GLM_MODEL
    [ -r "$MODEL" ] || die "GLM_MODEL=$MODEL is not a readable file"
else
    MODEL=bench/models/glm52-L$LAYERS-q8_0.gguf
    SYNTH=(./ds4-synth --arch glm-dsa --preset glm52 --recipe q8_0 --layers "$LAYERS")
    want=$("${SYNTH[@]}" --dry-run | sed -n 's/^file size: \([0-9]*\) bytes.*/\1/p')
    [ -n "$want" ] || die "ds4-synth --dry-run did not report the file size"
    have=$(stat -c %s "$MODEL" 2>/dev/null || echo 0)
    if [ "$have" != "$want" ]; then
        mkdir -p bench/models
        avail=$(df -B1 --output=avail bench/models | tail -n 1 | tr -d ' ')
        [ "$avail" -ge $((want + (1 << 30))) ] ||
            die "not enough disk space in bench/models for $want bytes (+1 GB); or set GLM_MODEL=FILE"
        say "writing $MODEL: the GLM 5.2 shape, $LAYERS layers, q8_0, RANDOM weights ($want bytes)"
        rm -f "$MODEL"
        "${SYNTH[@]}" -o "$MODEL"
    fi
fi
say "model: $MODEL"

mkdir -p "$OUT"
RES=$OUT/glm-$(date +%Y%m%d-%H%M%S).txt
: > "$RES"

# rss CMD...: runs it, its stdout, then "rss_kb N" (peak RSS of the child)
rss() { /usr/bin/python3 -c '
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
sys.stdout.write(r.stdout.decode())
print("rss_kb", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r.returncode)' "$@"; }

rp=(--repack); [ "$REPACK" = 1 ] || rp=()
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
{
    echo "# ds4 vs llama.cpp on glm-dsa, $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "# machine: $cpu, $(nproc) CPUs, $(awk '/MemTotal/ { printf "%.0f GB", $2 / 1e6 }' /proc/meminfo); threads $THREADS; load average $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# model: $MODEL ($(stat -c %s "$MODEL") bytes)"
    echo "# ds4 $(./ds4-bench --version 2>&1 | head -n 1); llama.cpp release of node-llama-cpp@3.22.1 (prebuilt CPU libraries), repack $REPACK"
} | tee -a "$RES" >&2

for ((r = 1; r <= ROUNDS; r++)); do
    for n in $PREFILL; do
        order="ds4 llama"; [ $((r % 2)) = 0 ] && order="llama ds4"
        for e in $order; do
            if [ $e = ds4 ]; then
                out=$(rss ./ds4-bench -m "$MODEL" --prompt-file "$TEXT" --ctx-start "$n" --ctx-max "$n" \
                          --gen-tokens "$DECODE" -t "$THREADS" --no-probe) || die "ds4-bench failed (prefill $n)"
                row=$(echo "$out" | awk -F, -v n="$n" '$1 == n { print $3, $5 }')
                pf=${row% *}; dc=${row#* }
            else
                out=$(rss "$LLAMA_LOGITS" bench -m "$MODEL" --prefill "$n" --decode "$DECODE" -t "$THREADS" \
                          "${rp[@]}") || die "llama.cpp failed (prefill $n)"
                pf=$(echo "$out" | awk '/^prefill/ { print $4 }'); dc=$(echo "$out" | awk '/^prefill/ { print $8 }')
            fi
            kb=$(echo "$out" | awk '/^rss_kb/ { print $2 }')
            echo "engine $e round $r prefill $n prefill_tps $pf decode_tps $dc rss_kb $kb" | tee -a "$RES" >&2
        done
    done
done

/usr/bin/python3 - "$RES" <<'PYEOF' | tee -a "$RES"
import statistics as st, sys
eng = {}
for l in open(sys.argv[1]):
    r = l.split()
    if not r or r[0] != "engine":
        continue
    d = {r[i]: r[i + 1] for i in range(0, len(r) - 1, 2)}
    for m in ("prefill_tps", "decode_tps", "rss_kb"):
        eng.setdefault((d["prefill"], m), {}).setdefault(d["engine"], []).append(float(d[m]))
print()
print("%-34s %12s %12s %9s" % ("median of the rounds", "ds4", "llama.cpp", "ds4/llama"))
for (n, m), v in sorted(eng.items(), key=lambda x: (int(x[0][0]), x[0][1])):
    a, b = st.median(v.get("ds4", [0])), st.median(v.get("llama", [0]))
    unit = {"prefill_tps": "prefill tok/s", "decode_tps": "decode tok/s", "rss_kb": "peak RSS MB"}[m]
    if m == "rss_kb":
        a, b = a / 1024, b / 1024
    print("%-34s %12.2f %12.2f %9.2f" % ("%s (prompt %s)" % (unit, n), a, b, a / b if b else 0))
print("(ds4/llama: how many times faster ds4 is; for RSS, ds4's size over llama.cpp's)")
PYEOF
say "results: $RES"
