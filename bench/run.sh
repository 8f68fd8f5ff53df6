#!/usr/bin/env bash
# bench/run.sh -- what `make bench` runs (after `make` has built everything).
#
#   1. picks the model: $BENCH_MODEL, else ./ds4flash.gguf, else the
#      synthetic bench/models/medium-q2.gguf (the real Flash per-layer shape,
#      4 layers, q2 recipe, the real vocabulary, RANDOM weights, ~9.5 GB),
#      created once by ds4-synth after a free-space check;
#   2. runs `make bench-kernels` (kernel throughput vs the machine's peaks)
#      and `make bench-attn` (the attention kernels);
#   3. runs ds4-bench on bench/data/italian_sample.txt (repeated as needed)
#      at contexts 2048, 4096, ... 32768 with 16 greedy tokens at each;
#   4. writes bench/results/bench-DATE.{csv,svg,log} (and kernels-DATE.txt).
#
# Settings (environment, or `make bench BENCH_CTX_MAX=8192 ...`):
#   BENCH_MODEL       model file (default: see 1.)
#   BENCH_TEXT        text to prefill (default bench/data/italian_sample.txt)
#   BENCH_CTX_START   first context frontier (default 2048)
#   BENCH_CTX_MAX     largest frontier (default 32768)
#   BENCH_STEP_MUL    frontier multiplier (default 2)
#   BENCH_STEP_INCR   if set: frontier increment instead of the multiplier
#   BENCH_GEN         greedy tokens per frontier (default 16)
#   BENCH_THREADS     worker threads (default 0 = all cores)
#   BENCH_KERNELS     0 = skip `make bench-kernels` and `bench-attn` (default 1)
#   BENCH_OUT         results directory (default bench/results)
#   DS4_SHARED        shared data (default ../shared): vocabulary fallback
#
#   BENCH_ARGS        arguments of the kernel benchmark (see the Makefile)
#
# Time: ds4-bench prefills every token once (32768 by default) and decodes
# BENCH_GEN tokens per frontier.  On the 2-core development VM with the
# synthetic medium model (1.36 GB of weights per token) the whole
# 2048..32768 run takes about 7 minutes (prefill ~100-130 tokens/s, decode
# ~11-15 tokens/s), the kernel benchmark about 3 more.  Making the model
# takes ~1 minute, once.  Lower BENCH_CTX_MAX for a quicker look, e.g.
# `make bench BENCH_CTX_MAX=8192`.
set -eu
cd "$(dirname "$0")/.."

CTX_START=${BENCH_CTX_START:-2048}
CTX_MAX=${BENCH_CTX_MAX:-32768}
STEP_MUL=${BENCH_STEP_MUL:-2}
STEP_INCR=${BENCH_STEP_INCR:-}
GEN=${BENCH_GEN:-16}
THREADS=${BENCH_THREADS:-0}
TEXT=${BENCH_TEXT:-bench/data/italian_sample.txt}
KERNELS=${BENCH_KERNELS:-1}
OUT=${BENCH_OUT:-bench/results}
SHARED=${DS4_SHARED:-../shared}

say() { echo "bench: $*"; }
die() { echo "bench: error: $*" >&2; exit 1; }

for b in ds4-bench ds4-synth; do
    [ -x "./$b" ] || die "./$b is missing: run \`make\` first (or \`make bench\`, which builds it)"
done
[ -r "$TEXT" ] || die "cannot read the text $TEXT"

# --- 1. the model ------------------------------------------------------------
. bench/model.sh
bench_model

mkdir -p "$OUT"
stamp=$(date +%Y%m%d-%H%M%S)
csv=$OUT/bench-$stamp.csv
svg=$OUT/bench-$stamp.svg
log=$OUT/bench-$stamp.log

# --- 2. kernel benchmarks -------------------------------------------------------
if [ "$KERNELS" != 0 ] && make -n bench-kernels >/dev/null 2>&1; then
    ktxt=$OUT/kernels-$stamp.txt
    say "running make bench-kernels (output also in $ktxt)"
    # a fresh make (not a sub-make of `make bench`: no jobserver to inherit);
    # BENCH_ARGS, if given, reaches it through the environment
    env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s bench-kernels 2>&1 | tee "$ktxt"
    [ "${PIPESTATUS[0]}" = 0 ] || die "make bench-kernels failed (see $ktxt)"
    # the attention kernels (one thread, a few seconds), in the same file
    env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s bench-attn 2>&1 | tee -a "$ktxt"
    [ "${PIPESTATUS[0]}" = 0 ] || die "make bench-attn failed (see $ktxt)"
elif [ "$KERNELS" != 0 ]; then
    say "no bench-kernels target in the Makefile: skipping the kernel benchmarks"
fi

# tokenizer throughput on the Italian sample (real vocabulary)
ttxt=$OUT/tokenizer-$stamp.txt
say "running make bench-tokenizer (output also in $ttxt)"
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s bench-tokenizer \
    BENCH_TOK_ARGS="-m vocab/deepseek-v4-vocab.gguf $TEXT" 2>&1 | tee "$ttxt" || say "bench-tokenizer failed (see $ttxt)"

# --- 3. ds4-bench ---------------------------------------------------------------
if [ -n "$STEP_INCR" ]; then STEP=(--step-incr "$STEP_INCR"); else STEP=(--step-mul "$STEP_MUL"); fi
ARGS=(-m "$MODEL" --prompt-file "$TEXT" --ctx-start "$CTX_START" --ctx-max "$CTX_MAX"
      "${STEP[@]}" --gen-tokens "$GEN" --threads "$THREADS" --plot "$svg")
say "running ./ds4-bench ${ARGS[*]}"
say "(one line per frontier as it completes; the log is $log)"
t0=$(date +%s)
set +e
./ds4-bench "${ARGS[@]}" 2>&1 > "$csv" | tee "$log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" = 0 ] || die "ds4-bench failed with exit status $rc (partial results: $csv, $log)"

# --- 4. where things went -----------------------------------------------------
echo
column -t -s, "$csv" 2>/dev/null || cat "$csv"
echo
say "done in $(( $(date +%s) - t0 )) s; results:"
say "  CSV   $csv"
say "  plot  $svg"
say "  log   $log (setup, snapshot save/restore MB/s per frontier)"
[ -n "${ktxt:-}" ] && say "  kernels $ktxt"
exit 0
