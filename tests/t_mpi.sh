#!/usr/bin/env bash
# Distributed inference over MPI (--dist pipeline|experts, src/mpi/), on the tiny
# models with 2 and 3 ranks on this machine (--oversubscribe):
#  - --dump-logits on rank 0 bit-identical to the single-process run, in
#    prefill, --decode-only and --split (prefill then decode), both models;
#    an explicit --dist-layers split too;
#  - per-rank files from ds4-gguf split --dist pipeline|experts (and a mix
#    of whole and part) give the same logits as the whole file;
#  - ds4-server under mpirun -np 2 answers a chat request (temperature 0)
#    with the same text as a single process;
#  - failures end the whole job with one clear message, never a hang: a
#    rank with a different model, a rank that cannot load, a bad
#    --dist-layers, --dist without mpirun, a worker killed mid-run, a
#    worker stopped mid-run (SIGSTOP: --dist-timeout names it).
# Skipped (with a message) when mpirun is absent or ds4 was built without MPI.
set -u
cd "$(dirname "$0")/.."
S="${DS4_SHARED:-../shared}"
G="$S/golden"
if ! command -v mpirun >/dev/null 2>&1; then
    echo "skip t_mpi: mpirun not installed (sh tools/deps.sh --test installs Open MPI)"; exit 0
fi
if ./ds4 --help | grep -q "no MPI support"; then
    echo "skip t_mpi: ds4 was built without MPI (mpicc was not found at build time)"; exit 0
fi
T=$(mktemp -d)
SRV=""
cleanup() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
# root in a container/CI: Open MPI refuses root without these
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(timeout 120 mpirun --oversubscribe)
SEQ="$G/sequences/seq_300.ids.txt"

dump() {   # dump MODEL OUT [flags...]: single process
    local m=$1 o=$2; shift 2
    ./ds4 -q -t 1 -m "$G/models/tiny-a-$m.gguf" --tokens-file "$SEQ" -n 0 --chunk 64 \
        --dump-logits "$o" "$@" > "$T/run.log" 2>&1 || { cat "$T/run.log"; return 1; }
}
dump_mpi() {   # dump_mpi MODE NP MODEL OUT [flags...]
    local dm=$1 np=$2 m=$3 o=$4; shift 4
    "${MPIRUN[@]}" -np "$np" ./ds4 -q -t 1 -m "$G/models/tiny-a-$m.gguf" --tokens-file "$SEQ" \
        -n 0 --chunk 64 --dump-logits "$o" --dist $dm "$@" > "$T/run.log" 2>&1 \
        || { cat "$T/run.log"; return 1; }
}

# 1. bit-identical logits
for m in q2 f16; do
    for mode in prefill decode-only split; do
        case $mode in
            prefill) fl=() ;;
            decode-only) fl=(--decode-only) ;;
            split) fl=(--split 100) ;;
        esac
        [ $m = f16 ] && [ $mode != prefill ] && continue
        dump $m "$T/one.f32" "${fl[@]}" || { bad "$m $mode single run"; continue; }
        for dm in pipeline experts; do
            for np in 2 3; do
                if dump_mpi $dm $np $m "$T/dist.f32" "${fl[@]}" && [ -s "$T/dist.f32" ] && cmp -s "$T/one.f32" "$T/dist.f32"; then
                    ok "$dm $m $mode, $np ranks: logits bit-identical"
                else
                    bad "$dm $m $mode, $np ranks: logits differ from the single process"
                fi
            done
        done
    done
done
dump q2 "$T/one.f32"
if dump_mpi pipeline 2 q2 "$T/dist.f32" --dist-layers 0:0,1:5 && cmp -s "$T/one.f32" "$T/dist.f32"; then
    ok "pipeline --dist-layers 0:0,1:5: logits bit-identical"
else
    bad "pipeline --dist-layers 0:0,1:5"
fi

# per-rank files (ds4-gguf split) give the same logits as the whole file
for np in 2 3; do
    ./ds4-gguf split --dist pipeline --ranks $np -m "$G/models/tiny-a-q2.gguf" -o "$T/part$np" > "$T/split.log" 2>&1 \
        || { bad "ds4-gguf split --ranks $np"; cat "$T/split.log"; continue; }
    if "${MPIRUN[@]}" -np $np ./ds4 -q -t 1 -m "$T/part$np-rank%d.gguf" --tokens-file "$SEQ" -n 0 --chunk 64 \
           --dump-logits "$T/dist.f32" --dist pipeline > "$T/run.log" 2>&1 && cmp -s "$T/one.f32" "$T/dist.f32"; then
        ok "split files, $np ranks: logits bit-identical to the whole file"
    else
        bad "split files, $np ranks"; cat "$T/run.log"
    fi
done
if "${MPIRUN[@]}" -np 1 ./ds4 -q -t 1 -m "$G/models/tiny-a-q2.gguf" --tokens-file "$SEQ" -n 0 --chunk 64 \
       --dump-logits "$T/dist.f32" --dist pipeline : -np 1 ./ds4 -q -t 1 -m "$T/part2-rank1.gguf" \
       --tokens-file "$SEQ" -n 0 --chunk 64 --dump-logits "$T/dist.f32" --dist pipeline > "$T/run.log" 2>&1 \
   && cmp -s "$T/one.f32" "$T/dist.f32"; then
    ok "whole file on rank 0, split file on rank 1: logits bit-identical"
else
    bad "whole file + split file"; cat "$T/run.log"
fi
# experts split files: every layer's dense part and a share of the experts
for np in 2 3; do
    ./ds4-gguf split --dist experts --ranks $np -m "$G/models/tiny-a-q2.gguf" -o "$T/xpart$np" > "$T/split.log" 2>&1 \
        || { bad "ds4-gguf split --dist experts --ranks $np"; cat "$T/split.log"; continue; }
    if "${MPIRUN[@]}" -np $np ./ds4 -q -t 1 -m "$T/xpart$np-rank%d.gguf" --tokens-file "$SEQ" -n 0 --chunk 64 \
           --dump-logits "$T/dist.f32" --dist experts > "$T/run.log" 2>&1 && cmp -s "$T/one.f32" "$T/dist.f32"; then
        ok "experts split files, $np ranks: logits bit-identical to the whole file"
    else
        bad "experts split files, $np ranks"; cat "$T/run.log"
    fi
done
dump q2 "$T/one-split.f32" --split 100
if "${MPIRUN[@]}" -np 1 ./ds4 -q -t 1 -m "$G/models/tiny-a-q2.gguf" --tokens-file "$SEQ" -n 0 --chunk 64 --split 100 \
       --dump-logits "$T/dist.f32" --dist experts : -np 1 ./ds4 -q -t 1 -m "$T/xpart2-rank1.gguf" \
       --tokens-file "$SEQ" -n 0 --chunk 64 --split 100 --dump-logits "$T/dist.f32" --dist experts > "$T/run.log" 2>&1 \
   && cmp -s "$T/one-split.f32" "$T/dist.f32"; then
    ok "experts: whole file on rank 0, experts part on rank 1, prefill + decode: logits bit-identical"
else
    bad "experts: whole file + experts part"; cat "$T/run.log"
fi
for f in "$T"/part2-rank*.gguf "$T"/xpart2-rank*.gguf; do
    [ "$(head -c 4 "$f")" = GGUF ] && ok "$(basename "$f"): a GGUF" || bad "$(basename "$f") is not a GGUF"
done

# 2. failures: one clear message, non-zero exit, no hang
expect_fail() {   # expect_fail LABEL PATTERN cmd...
    local label=$1 pat=$2; shift 2
    local t0=$SECONDS
    if "$@" > "$T/f.log" 2>&1; then bad "$label: succeeded"; return; fi
    if grep -q -- "$pat" "$T/f.log" && [ $((SECONDS - t0)) -lt 60 ]; then
        ok "$label: $(grep -m1 -- "$pat" "$T/f.log")"
    else
        bad "$label: no message matching '$pat'"; cat "$T/f.log"
    fi
}
A=(-q -t 1 --tokens-file "$SEQ" -n 0 --dist pipeline --dump-logits "$T/x.f32")
expect_fail "rank with another model" "rank 1 loaded a different model file" \
    "${MPIRUN[@]}" -np 1 ./ds4 -m "$G/models/tiny-a-q2.gguf" "${A[@]}" : -np 1 ./ds4 -m "$G/models/tiny-a-f16.gguf" "${A[@]}"
expect_fail "rank that cannot load" "rank 1 cannot load its part: $T/missing.gguf" \
    "${MPIRUN[@]}" -np 1 ./ds4 -m "$G/models/tiny-a-q2.gguf" "${A[@]}" : -np 1 ./ds4 -m "$T/missing.gguf" "${A[@]}"
expect_fail "bad --dist-layers" "expected 2 ranges" \
    "${MPIRUN[@]}" -np 2 ./ds4 -m "$G/models/tiny-a-q2.gguf" "${A[@]}" --dist-layers 0:1,3:5
expect_fail "more ranks than layers" "7 ranks but the model has only 6 layers" \
    "${MPIRUN[@]}" -np 7 ./ds4 -m "$G/models/tiny-a-q2.gguf" "${A[@]}"
expect_fail "--dist without mpirun peers" "needs at least 2 ranks" \
    timeout 60 ./ds4 -m "$G/models/tiny-a-q2.gguf" "${A[@]}"
expect_fail "--dist-layers with experts" "applies to --dist pipeline only" \
    "${MPIRUN[@]}" -np 2 ./ds4 -m "$G/models/tiny-a-q2.gguf" -q --tokens-file "$SEQ" -n 0 --dist experts --dist-layers 0:2,3:5
expect_fail "part file without --dist" "holds one rank's part of a split model" \
    timeout 60 ./ds4 -q -m "$T/part2-rank0.gguf" --tokens-file "$SEQ" -n 0
expect_fail "part files of another rank count" "is the part of rank 0 of 3, but this is rank 0 of 2" \
    "${MPIRUN[@]}" -np 2 ./ds4 -q -m "$T/part3-rank%d.gguf" --tokens-file "$SEQ" -n 0 --dist pipeline
expect_fail "part files with --dist experts" "cannot run --dist experts" \
    "${MPIRUN[@]}" -np 2 ./ds4 -q -m "$T/part2-rank%d.gguf" --tokens-file "$SEQ" -n 0 --dist experts
expect_fail "ds4-gguf split of a part" "already one rank's part" \
    ./ds4-gguf split --dist pipeline --ranks 2 -m "$T/part2-rank0.gguf" -o "$T/again"
expect_fail "experts part without --dist" "run it under mpirun with --dist experts" \
    timeout 60 ./ds4 -q -m "$T/xpart2-rank0.gguf" --tokens-file "$SEQ" -n 0
expect_fail "experts parts with --dist pipeline" "holds a share of every layer's experts" \
    "${MPIRUN[@]}" -np 2 ./ds4 -q -m "$T/xpart2-rank%d.gguf" --tokens-file "$SEQ" -n 0 --dist pipeline
expect_fail "experts parts of another rank count" "is the part of rank 0 of 3, but this is rank 0 of 2" \
    "${MPIRUN[@]}" -np 2 ./ds4 -q -m "$T/xpart3-rank%d.gguf" --tokens-file "$SEQ" -n 0 --dist experts
expect_fail "experts parts in the wrong rank order" "is the part of rank 1 of 2, but this is rank 0 of 2" \
    "${MPIRUN[@]}" -np 1 ./ds4 -q -m "$T/xpart2-rank1.gguf" --tokens-file "$SEQ" -n 0 --dist experts : \
    -np 1 ./ds4 -q -m "$T/xpart2-rank0.gguf" --tokens-file "$SEQ" -n 0 --dist experts
expect_fail "ds4-gguf split --dist experts --dist-layers" "applies to --dist pipeline only" \
    ./ds4-gguf split --dist experts --ranks 2 --dist-layers 0:2,3:5 -m "$G/models/tiny-a-q2.gguf" -o "$T/ex"
expect_fail "ds4-gguf split of an experts part" "already one rank's part" \
    ./ds4-gguf split --dist experts --ranks 2 -m "$T/xpart2-rank0.gguf" -o "$T/again"
expect_fail "ds4-gguf split, more ranks than experts" "9 ranks but the model has only 8 routed experts" \
    ./ds4-gguf split --dist experts --ranks 9 -m "$G/models/tiny-a-q2.gguf" -o "$T/ex"
expect_fail "--dist unknown mode" "unknown mode 'rows'" \
    timeout 60 ./ds4 -m "$G/models/tiny-a-q2.gguf" -q --tokens-file "$SEQ" -n 0 --dist rows

rank_pid() {   # rank_pid ROOT NAME RANK: the pid of that rank among ROOT's descendants
    local q p
    for q in $(pgrep -P "$1"); do
        if [ "$(cat /proc/$q/comm 2>/dev/null)" = "$2" ] &&
           tr '\0' '\n' < /proc/$q/environ 2>/dev/null | grep -qE "^(OMPI_COMM_WORLD_RANK|PMI_RANK)=$3\$"; then
            echo "$q"; return
        fi
        p=$(rank_pid "$q" "$2" "$3"); [ -n "$p" ] && { echo "$p"; return; }
    done
}

# a worker killed during a long generation: the job stops within seconds
"${MPIRUN[@]}" -np 2 ./ds4 -q -t 1 -m "$G/models/tiny-a-q2.gguf" --tokens-file "$SEQ" -n 30000 -c 32768 \
    --dist pipeline > "$T/k.out" 2> "$T/k.err" &
MP=$!
W=""
for i in $(seq 1 100); do
    W=$(rank_pid $MP ds4 1)
    [ -n "$W" ] && [ -s "$T/k.out" ] && break
    sleep 0.1
done
if [ -z "$W" ]; then
    bad "killed worker: could not find rank 1's process"; kill $MP 2>/dev/null; wait $MP
else
    t0=$(date +%s)
    kill -9 "$W"
    wait $MP; rc=$?
    dt=$(( $(date +%s) - t0 ))
    if [ $rc -ne 0 ] && [ $dt -le 15 ] && grep -q "rank 1" "$T/k.err"; then
        ok "killed worker: job ended in ${dt}s (rc $rc): $(grep -m1 'rank 1' "$T/k.err" | sed 's/^ *//')"
    else
        bad "killed worker: rc $rc after ${dt}s"; cat "$T/k.err"
    fi
fi

# a worker that stops answering (SIGSTOP: a hung machine, a network
# partition) during a long generation: after --dist-timeout the job stops
# with one message naming it.  Pipeline over 3 ranks stops the middle one
# (rank 0 waits on rank 2, which waits on rank 1); experts mode stalls in
# the exchange of expert rows.
for sm in "pipeline 3" "experts 2"; do
    set -- $sm
    "${MPIRUN[@]}" -np $2 ./ds4 -q -t 1 -m "$G/models/tiny-a-q2.gguf" --tokens-file "$SEQ" -n 30000 -c 32768 \
        --dist $1 --dist-timeout 3 > "$T/k.out" 2> "$T/k.err" &
    MP=$!
    W=""
    for i in $(seq 1 100); do
        W=$(rank_pid $MP ds4 1)
        [ -n "$W" ] && [ -s "$T/k.out" ] && break
        sleep 0.1
    done
    if [ -z "$W" ]; then
        bad "stopped worker ($1): could not find rank 1's process"; kill $MP 2>/dev/null; wait $MP; continue
    fi
    t0=$(date +%s)
    kill -STOP "$W"
    wait $MP; rc=$?
    dt=$(( $(date +%s) - t0 ))
    kill -KILL "$W" 2>/dev/null   # in case the launcher left it stopped
    if [ $rc -ne 0 ] && [ $dt -le 30 ] && grep -q "rank 1 stopped answering" "$T/k.err"; then
        ok "stopped worker ($1, $2 ranks): job ended in ${dt}s (rc $rc): $(grep -m1 'stopped answering' "$T/k.err" | cut -c1-110)"
    else
        bad "stopped worker ($1, $2 ranks): rc $rc after ${dt}s"; cat "$T/k.err"
    fi
done
expect_fail "--dist-timeout out of range" "dist-timeout" \
    timeout 60 ./ds4 -m "$G/models/tiny-a-q2.gguf" -q --tokens-file "$SEQ" -n 0 --dist pipeline --dist-timeout -1

# 3. ds4-server under mpirun -np 2: the same chat answer
REQ='{"model":"x","messages":[{"role":"user","content":"Hello there"}],"max_tokens":24,"temperature":0}'
ask() {   # ask PORT OUT
    for i in $(seq 1 200); do curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && break; sleep 0.1; done
    curl -sf "http://127.0.0.1:$1/v1/chat/completions" -H 'Content-Type: application/json' -d "$REQ" \
        | /usr/bin/python3 -c 'import json,sys; m=json.load(sys.stdin)["choices"][0]["message"]; print(repr(m.get("reasoning_content")), repr(m.get("content")))' > "$2"
}
P1=$((20000 + RANDOM % 20000)); P2=$((P1 + 1))
./ds4-server -m "$G/models/tiny-a-q2.gguf" -t 1 -c 2048 --port $P1 2> "$T/s1.log" & SRV=$!
ask $P1 "$T/a1.txt"; kill $SRV; wait $SRV; SRV=""
for SDM in pipeline experts; do
P2=$((P2 + 1))
"${MPIRUN[@]}" -np 2 ./ds4-server -m "$G/models/tiny-a-q2.gguf" -t 1 -c 2048 --port $P2 --dist $SDM 2> "$T/s2.log" & SRV=$!
ask $P2 "$T/a2.txt"
# SIGTERM to rank 0 alone: it shuts down and releases the worker
R0=$(rank_pid $SRV ds4-server 0)
[ -n "$R0" ] && kill -TERM $R0
wait $SRV; src=$?; SRV=""
if [ -s "$T/a1.txt" ] && cmp -s "$T/a1.txt" "$T/a2.txt"; then
    ok "ds4-server --dist $SDM, 2 ranks: same answer as one process: $(cut -c1-60 "$T/a2.txt")"
else
    bad "ds4-server --dist $SDM, 2 ranks: answers differ"; cat "$T/a1.txt" "$T/a2.txt"; tail -5 "$T/s2.log"
fi
if [ $src -eq 0 ] && grep -q stopped "$T/s2.log"; then ok "ds4-server --dist $SDM, 2 ranks: clean shutdown"
else bad "ds4-server --dist $SDM, 2 ranks: exit $src"; tail -5 "$T/s2.log"; fi

done

[ $fail -eq 0 ] && echo "t_mpi: all passed" || echo "t_mpi: $fail failed"
[ $fail -eq 0 ]
