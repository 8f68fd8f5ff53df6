#!/usr/bin/env bash
# bench/llamacpp.sh -- `make bench-llamacpp`: ds4 and llama.cpp (its own
# DeepSeek V4 implementation, release of 2026-09) on the same GGUF, same
# machine, same run, alternating rounds; medians and ratios.
#
#   1. llama.cpp: bench/llamacpp/setup.sh (npm node-llama-cpp@3.22.1,
#      --ignore-scripts: its prebuilt CPU libraries and its source; with
#      the server part also llama-server built from that source, once).
#   2. the model: bench/model.sh ($BENCH_MODEL, ./ds4flash.gguf, or the
#      synthetic 4-layer real-shape q2 model bench/run.sh uses).
#   3. engines: for each round and each prefill size, ds4-bench (one
#      frontier: a fresh prefill of N tokens, then D greedy tokens) and
#      llama_logits bench (a fresh context with llama.cpp's defaults, N
#      tokens, then D greedy tokens), the order alternating between rounds.
#      Peak RSS of each process (getrusage of the child).
#   4. servers: ds4-server and llama-server, one at a time, alternating,
#      each answering one streaming /v1/completions request of ~500 prompt
#      tokens and G generated tokens after a warm-up request: time to first
#      token and decode tokens/s measured by the client.
#   5. a table: per measurement the median of each engine and ds4/llama.cpp.
#
# Settings (environment or make variables):
#   BENCH_MODEL                model file (see 2.)
#   LLAMACPP_PREFILL           prefill sizes (default "512 2048 8192")
#   LLAMACPP_DECODE            decoded tokens per run (default 32)
#   LLAMACPP_ROUNDS            rounds (default 3)
#   LLAMACPP_THREADS           threads of both engines (default: all CPUs)
#   LLAMACPP_SERVER            0 = skip the servers (default 1; the first
#                              run builds llama-server: ~10-20 min on 2 cores)
#   LLAMACPP_SERVER_GEN        tokens generated per server request (default 64)
#   LLAMACPP_OUT               results directory (default bench/results)
# llama.cpp runs without weight repacking (--no-repack): its CPU "extra
# buffer" aborts on DeepSeek V4 with more than one token per batch in this
# release (GGML_ASSERT(*cur_backend_id != -1)).  Everything else is its
# default (F16 KV cache, flash attention auto, n_batch 2048, n_ubatch 512).
set -eu
cd "$(dirname "$0")/.."
SHARED=${DS4_SHARED:-../shared}
PREFILL=${LLAMACPP_PREFILL:-512 2048 8192}
DECODE=${LLAMACPP_DECODE:-32}
ROUNDS=${LLAMACPP_ROUNDS:-3}
THREADS=${LLAMACPP_THREADS:-$(nproc)}
SERVER=${LLAMACPP_SERVER:-1}
SGEN=${LLAMACPP_SERVER_GEN:-64}
OUT=${LLAMACPP_OUT:-bench/results}
TEXT=bench/data/italian_sample.txt
say() { echo "bench-llamacpp: $*" >&2; }
die() { echo "bench-llamacpp: error: $*" >&2; exit 1; }
for b in ds4-bench ds4-synth ds4-server; do
    [ -x "./$b" ] || die "./$b is missing: run \`make\` first"
done

# --- 1. llama.cpp -------------------------------------------------------------
sargs=(); [ "$SERVER" = 1 ] && sargs=(--server)
ENV=$(bench/llamacpp/setup.sh "${sargs[@]}") || die "bench/llamacpp/setup.sh failed (above)"
eval "$ENV"
export GGML_BACKEND_DIR

# --- 2. the model ---------------------------------------------------------------
. bench/model.sh
bench_model
maxp=0; for n in $PREFILL; do [ "$n" -gt "$maxp" ] && maxp=$n; done

mkdir -p "$OUT"
stamp=$(date +%Y%m%d-%H%M%S)
RES=$OUT/llamacpp-$stamp.txt
: > "$RES"
T=$(mktemp -d)
trap 'rm -rf "$T"; [ -n "${SPID:-}" ] && kill "$SPID" 2>/dev/null; true' EXIT

# run NAME CMD...: runs it, appends "NAME <stdout line...> rss_kb N" rows
rss() { /usr/bin/python3 -c '
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
sys.stdout.write(r.stdout.decode())
print("rss_kb", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r.returncode)' "$@"; }

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
{
    echo "# ds4 vs llama.cpp, $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "# machine: $cpu, $(nproc) CPUs, $(awk '/MemTotal/ { printf "%.0f GB", $2 / 1e6 }' /proc/meminfo); threads $THREADS"
    echo "# model: $MODEL ($(stat -c %s "$MODEL") bytes)"
    echo "# ds4 $(./ds4 --version 2>&1 | head -n 1); llama.cpp release of node-llama-cpp@3.22.1 (prebuilt CPU libraries)"
} | tee -a "$RES" >&2

# --- 3. the engines, alternating -------------------------------------------------
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
                          --gating-override) || die "llama.cpp failed (prefill $n)"
                pf=$(echo "$out" | awk '/^prefill/ { print $4 }'); dc=$(echo "$out" | awk '/^prefill/ { print $8 }')
            fi
            kb=$(echo "$out" | awk '/^rss_kb/ { print $2 }')
            echo "engine $e round $r prefill $n prefill_tps $pf decode_tps $dc rss_kb $kb" | tee -a "$RES" >&2
        done
    done
done

# --- 4. the servers, one at a time -----------------------------------------------
wait_port() {   # wait_port LOG PID: the port a server listens on, from its log / health
    local log=$1 pid=$2 port=$3
    for _ in $(seq 1 600); do
        kill -0 "$pid" 2>/dev/null || { tail -n 20 "$log" >&2; die "the server exited while starting"; }
        if curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1; then return 0; fi
        sleep 0.5
    done
    die "the server did not answer /health within 300 s"
}
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
if [ "$SERVER" = 1 ]; then
    ctx=$((maxp > 4096 ? maxp : 4096))
    for ((r = 1; r <= ROUNDS; r++)); do
        order="ds4 llama"; [ $((r % 2)) = 0 ] && order="llama ds4"
        for e in $order; do
            port=$(free_port)
            if [ $e = ds4 ]; then
                ./ds4-server -m "$MODEL" --port "$port" -t "$THREADS" --ctx "$ctx" > "$T/server.log" 2>&1 &
            else
                "$LLAMA_SERVER" -m "$MODEL" --port "$port" -t "$THREADS" -c "$ctx" --no-repack \
                    --override-kv deepseek4.expert_gating_func=int:4 > "$T/server.log" 2>&1 &
            fi
            SPID=$!
            wait_port "$T/server.log" "$SPID" "$port"
            /usr/bin/python3 bench/llamacpp/stream_client.py "http://127.0.0.1:$port" "$TEXT" 4 100 > /dev/null ||
                die "$e server: warm-up request failed"
            line=$(/usr/bin/python3 bench/llamacpp/stream_client.py "http://127.0.0.1:$port" "$TEXT" "$SGEN" 500) ||
                die "$e server: request failed"
            kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=
            echo "server $e round $r $line" | tee -a "$RES" >&2
        done
    done
fi

# --- 5. medians and ratios ---------------------------------------------------------
/usr/bin/python3 - "$RES" <<'EOF' | tee -a "$RES"
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1]) if not l.startswith("#")]
def kv(r): return {r[i]: r[i + 1] for i in range(0, len(r) - 1, 2)}
eng, srv = {}, {}
for r in rows:
    if not r:
        continue
    d = kv(r)
    if r[0] == "engine":
        for m in ("prefill_tps", "decode_tps", "rss_kb"):
            eng.setdefault((d["prefill"], m), {}).setdefault(d["engine"], []).append(float(d[m]))
    elif r[0] == "server":
        for m in ("ttft_s", "decode_tps"):
            srv.setdefault(m, {}).setdefault(d["server"], []).append(float(d[m]))
print()
print("%-34s %12s %12s %9s" % ("median of the rounds", "ds4", "llama.cpp", "ds4/llama"))
for (n, m), v in sorted(eng.items(), key=lambda x: (int(x[0][0]), x[0][1])):
    a, b = st.median(v.get("ds4", [0])), st.median(v.get("llama", [0]))
    unit = {"prefill_tps": "prefill tok/s", "decode_tps": "decode tok/s", "rss_kb": "peak RSS MB"}[m]
    if m == "rss_kb":
        a, b = a / 1024, b / 1024
    print("%-34s %12.1f %12.1f %9.2f" % ("%s (prompt %s)" % (unit, n), a, b, a / b if b else 0))
for m, v in srv.items():
    a, b = st.median(v.get("ds4", [0])), st.median(v.get("llama", [0]))
    label = {"ttft_s": "server time to first token s", "decode_tps": "server decode tok/s"}[m]
    # time: lower is better, the ratio says how many times faster ds4 is
    print("%-34s %12.2f %12.2f %9.2f" % (label, a, b, (b / a if m == "ttft_s" else a / b) if a and b else 0))
print("(ds4/llama: how many times faster ds4 is; for RSS, ds4's size over llama.cpp's)")
EOF
say "results: $RES"
