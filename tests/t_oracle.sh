#!/usr/bin/env bash
# Forward-pass oracles (../shared/oracle/README.md, ../shared/golden/README.md):
#  (1) --no-qat free-running logits vs ref-noqat, both models, every sequence,
#      in prefill, --decode-only and prefill-then-decode at several splits;
#  (2) QAT on, f16 model, first 40 positions vs the original engine (ds4/);
#  (3) QAT on, long sequences, statistical, both models;
#  (4) teacher-forced per-sublayer check, QAT on and off, both models;
#  MXFP4 experts (tiny-a-mxfp4): (1), decode == prefill and (4), against
#      the oracle run here (no golden directory for that model);
#  plus: decode == prefill == any chunking, bit for bit; every kernel table
#  (DS4_KERNELS) end to end; wrong-family and broken files refused before
#  any compute.
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin under DEBUG=1)
S="${DS4_SHARED:-../shared}"
G="$S/golden"
PY=/usr/bin/python3
CMP="$PY $S/oracle/compare_logits.py"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail+1)); }

run() {   # run MODEL SEQ OUT [ds4 flags...]
    local m=$1 s=$2 o=$3; shift 3
    $BD/ds4 -q -m "$G/models/tiny-a-$m.gguf" --tokens-file "$G/sequences/$s.ids.txt" \
        --dump-logits "$o" -n 0 "$@" > "$T/run.log" 2>&1 || { cat "$T/run.log"; return 1; }
}

check() {  # check MODEL SOURCE SEQ FILE CHECK LABEL
    if $CMP "$G/tiny-a-$1" "$2" "$3" "$4" --check "$5" > "$T/cmp.log" 2>&1; then
        ok "$6"
    else
        bad "$6"; sed 's/^/    /' "$T/cmp.log"
    fi
}

seqs="seq_001 seq_007 seq_040 seq_300 seq_600a"
splits="1 37 128 300"
sched_seq=seq_600a
sched_args=("--decode-only" "--chunk 7" "--chunk 100 --split 257" "-t 1" "--chunk 33 -t 3")
kern_seq=seq_300
mx_kern_seq=seq_300
qat_short="seq_007 seq_040 seq_300 seq_600a"
qat_stat="seq_300 seq_600a"
# The sanitizer suite (DS4_DEBUG_BUILD=1, ASan ~10x slower) runs a subset:
# what it is for is a clean run of every code path (prefill, decode, splits,
# chunkings, thread counts, kernel tables, QAT on/off, dumps); the numeric
# comparisons in full are the optimized suite's job.
if [ "${DS4_DEBUG_BUILD:-0}" = 1 ]; then
    seqs="seq_007 seq_300"; splits="37"; sched_seq=seq_300
    sched_args=("--decode-only" "--chunk 100 --split 257" "--chunk 33 -t 3")
    kern_seq=seq_040; mx_kern_seq=seq_040; qat_short="seq_040"; qat_stat=""
fi

# (1) QAT off, tight, every sequence and evaluation mode
for m in f16 q2; do
    for s in $seqs; do
        n=$(wc -w < "$G/sequences/$s.ids.txt")
        run $m $s "$T/p.f32" --no-qat || { bad "$m $s no-qat run"; continue; }
        check $m ref-noqat $s "$T/p.f32" noqat "(1) noqat $m $s prefill"
        run $m $s "$T/d.f32" --no-qat --decode-only && check $m ref-noqat $s "$T/d.f32" noqat "(1) noqat $m $s decode-only"
        cmp -s "$T/p.f32" "$T/d.f32" && ok "$m $s no-qat decode == prefill (bitwise)" || bad "$m $s no-qat decode != prefill"
        for sp in $splits; do
            [ "$sp" -lt "$n" ] || continue
            run $m $s "$T/x.f32" --no-qat --split $sp && check $m ref-noqat $s "$T/x.f32" noqat "(1) noqat $m $s split $sp"
        done
    done
done

# bitwise agreement of every schedule with QAT on
for m in f16 q2; do
    run $m $sched_seq "$T/p.f32" -t 2 || bad "$m qat run"
    for args in "${sched_args[@]}"; do
        run $m $sched_seq "$T/x.f32" $args && cmp -s "$T/p.f32" "$T/x.f32" \
            && ok "$m $sched_seq QAT: '$args' == prefill (bitwise)" || bad "$m $sched_seq QAT: '$args' differs from prefill"
    done
done

# every kernel table end to end (the default is the best the CPU has), and
# the same bits from every table (docs/NUMERICS.md), QAT on and off
for m in f16 q2; do
    run $m $kern_seq "$T/def-$m.f32" || bad "$m $kern_seq default-table run"
    run $m $kern_seq "$T/defn-$m.f32" --no-qat || bad "$m $kern_seq default-table no-qat run"
done
for kt in scalar avx2 avx512 avx512-packed amx; do
    if ! "${DS4_BUILD_DIR:-build}"/tests/test_kernels --has-table $kt > /dev/null 2>&1; then
        echo "info: table $kt not available on this CPU"; continue
    fi
    for m in f16 q2; do
        DS4_KERNELS=$kt run $m $kern_seq "$T/k.f32" --no-qat && \
            check $m ref-noqat $kern_seq "$T/k.f32" noqat "(1) noqat $m $kern_seq with DS4_KERNELS=$kt"
        cmp -s "$T/k.f32" "$T/defn-$m.f32" && ok "$m no-qat DS4_KERNELS=$kt == default table (bitwise)" \
            || bad "$m no-qat DS4_KERNELS=$kt differs from the default table"
        DS4_KERNELS=$kt run $m $kern_seq "$T/kp.f32" && DS4_KERNELS=$kt run $m $kern_seq "$T/kd.f32" --decode-only && \
            cmp -s "$T/kp.f32" "$T/kd.f32" && ok "$m DS4_KERNELS=$kt: decode == prefill (bitwise)" \
            || bad "$m DS4_KERNELS=$kt: decode differs from prefill"
        cmp -s "$T/kp.f32" "$T/def-$m.f32" && ok "$m QAT DS4_KERNELS=$kt == default table (bitwise)" \
            || bad "$m QAT DS4_KERNELS=$kt differs from the default table"
    done
    # QAT on, q2 (the int8 tiles): against the original engine; kp.f32 still
    # holds the q2 QAT prefill of the loop's last model
    [ -z "$qat_stat" ] || check q2 ds4 $kern_seq "$T/kp.f32" qat-stat "(3) qat-stat q2 $kern_seq with DS4_KERNELS=$kt"
done

# Q8_0 weights holding the code -128 (valid in the format, though no
# quantizer makes it): loading marks such matrices, which then keep the
# general kernels (q8_0_q8_0a_tile_sym needs codes in [-127, 127]).  A copy
# of tiny-a-q2 with one -128 code in every dense Q8_0 matrix gives the same
# bits on every table, and other logits than the original.
$PY - "$S/oracle" "$G/models/tiny-a-q2.gguf" "$T/m128.gguf" <<'PYEOF' > "$T/m128.log" 2>&1 || { bad "patching a -128 code"; cat "$T/m128.log"; }
import shutil, sys
sys.path.insert(0, sys.argv[1])
import gguf_reader as g
shutil.copyfile(sys.argv[2], sys.argv[3])
r = g.GGUFReader(sys.argv[2])
with open(sys.argv[3], "r+b") as f:
    n = 0
    for name in r.tensor_order:
        shape, typ, off = r.tensors[name]
        if g.type_name(typ) != "Q8_0" or len(shape) != 2: continue
        f.seek(r.data_offset + off + 34 * 3 + 2 + 5)   # block 3, code 5 of row 0
        f.write(b"\x80")
        n += 1
    assert n > 0
print(n)
PYEOF
m128_run() {   # m128_run MODEL OUT TABLE [ds4 flags...]
    local mf=$1 o=$2 kt=$3; shift 3
    DS4_KERNELS=$kt $BD/ds4 -q -m "$mf" --tokens-file "$G/sequences/$kern_seq.ids.txt" --dump-logits "$o" \
        -n 0 "$@" > "$T/run.log" 2>&1 || { cat "$T/run.log"; return 1; }
}
if m128_run "$T/m128.gguf" "$T/m128-scalar.f32" scalar; then
    m128_run "$G/models/tiny-a-q2.gguf" "$T/m128-orig.f32" scalar || bad "q2 run"
    cmp -s "$T/m128-scalar.f32" "$T/m128-orig.f32" && bad "the -128 codes changed no logit" \
        || ok "-128 codes in $(cat "$T/m128.log") Q8_0 matrices change the logits"
    for kt in avx2 avx512 avx512-packed amx; do
        "${DS4_BUILD_DIR:-build}"/tests/test_kernels --has-table $kt > /dev/null 2>&1 || continue
        m128_run "$T/m128.gguf" "$T/m128-k.f32" $kt && cmp -s "$T/m128-k.f32" "$T/m128-scalar.f32" \
            && ok "Q8_0 with -128 codes: DS4_KERNELS=$kt == scalar (bitwise)" \
            || bad "Q8_0 with -128 codes: DS4_KERNELS=$kt differs from scalar"
        m128_run "$T/m128.gguf" "$T/m128-d.f32" $kt --decode-only && cmp -s "$T/m128-d.f32" "$T/m128-scalar.f32" \
            && ok "Q8_0 with -128 codes: DS4_KERNELS=$kt decode == scalar prefill (bitwise)" \
            || bad "Q8_0 with -128 codes: DS4_KERNELS=$kt decode differs from the scalar prefill"
    done
else
    bad "ds4 on the model with -128 codes"
fi

if DS4_KERNELS=no-such-table "${DS4_BIN_DIR:-.}"/ds4 -q -m "$G/models/tiny-a-q2.gguf" --tokens 0 -n 0 > "$T/kt.log" 2>&1; then
    bad "DS4_KERNELS=no-such-table accepted"
elif grep -q "DS4_KERNELS=no-such-table: no such kernel table" "$T/kt.log"; then
    ok "DS4_KERNELS naming no table is refused"
else
    bad "DS4_KERNELS=no-such-table: unexpected message"; sed 's/^/    /' "$T/kt.log"
fi

# (2) QAT on, f16 model, first 40 positions vs the original engine
for s in $qat_short; do
    run f16 $s "$T/q.f32" && check f16 ds4 $s "$T/q.f32" qat-short "(2) qat-short f16 $s"
done

# (3) QAT on, statistical
for m in f16 q2; do
    for s in $qat_stat; do
        run $m $s "$T/q.f32" && check $m ds4 $s "$T/q.f32" qat-stat "(3) qat-stat $m $s"
    done
done

# (4) teacher-forced sublayers (300 tokens).  q2 with QAT on quantizes
# activations like the original engine, so the oracle runs --emulate-ds4
# (through tests/oracle/teacher.py, which corrects one float32 constant of
# that emulation: see the file).
teach() {  # teach MODEL LABEL [ds4 flags] -- [oracle flags]
    local m=$1 label=$2; shift 2
    local dflags=() oflags=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do dflags+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    oflags=("$@")
    $BD/ds4 -q -m "$G/models/tiny-a-$m.gguf" --tokens-file "$G/sequences/seq_300.ids.txt" -n 0 \
        --dump-logits "$T/tl.f32" --dump-hidden "$T/th.f32" "${dflags[@]}" > "$T/run.log" 2>&1 \
        || { bad "$label run"; cat "$T/run.log"; return; }
    if $PY tests/oracle/teacher.py "$S/oracle" "$G/models/tiny-a-$m.gguf" \
        --tokens-file "$G/sequences/seq_300.ids.txt" --teacher "$T/th.f32" \
        --compare "$T/tl.f32" --teacher-max-median 2e-5 "${oflags[@]}" > "$T/teach.log" 2>&1; then
        ok "$label ($(grep -o 'worst per-sublayer median relative error: [0-9.e+-]*' "$T/teach.log"))"
    else
        bad "$label"; sed 's/^/    /' "$T/teach.log"
    fi
}
teach f16 "(4) teacher f16 QAT on"
if [ "${DS4_DEBUG_BUILD:-0}" != 1 ]; then   # (the same dumps, other oracle flags)
    teach f16 "(4) teacher f16 --no-qat" --no-qat -- --no-qat
    teach q2 "(4) teacher q2 QAT on (emulate-ds4)" -- --emulate-ds4
    teach q2 "(4) teacher q2 --no-qat" --no-qat -- --no-qat
fi

# MXFP4 routed experts (tiny-a-mxfp4.gguf has no golden directory: the
# oracle computes the reference here).  (1) --no-qat against ds4_ref.py
# --no-qat --dtype float64 with the thresholds of check (1): full-row rel.
# L2 <= 5e-5 at every position, top-1 agreement >= 99 %; decode == prefill
# bitwise for every kernel table; (4) teacher-forced, QAT on (MXFP4 meets
# Q8_0a activations, as --emulate-ds4 assumes) and off.
mx_noqat() {  # mx_noqat SEQ LABEL [ds4 flags]
    local s=$1 label=$2; shift 2
    [ -f "$T/mxref_$s.f32" ] || $PY "$S/oracle/ds4_ref.py" "$G/models/tiny-a-mxfp4.gguf" \
        --tokens-file "$G/sequences/$s.ids.txt" --no-qat --dtype float64 --out "$T/mxref_$s.f32" \
        > "$T/ref.log" 2>&1 || { bad "$label: reference run"; cat "$T/ref.log"; return; }
    run mxfp4 $s "$T/mx.f32" --no-qat "$@" || { bad "$label run"; return; }
    if $PY - "$T/mxref_$s.f32" "$T/mx.f32" > "$T/cmp.log" 2>&1 <<'PYEOF'
import sys, numpy as np
r = np.fromfile(sys.argv[1], dtype=np.float32).reshape(-1, 4096).astype(np.float64)
e = np.fromfile(sys.argv[2], dtype=np.float32).reshape(-1, 4096).astype(np.float64)
assert r.shape == e.shape, (r.shape, e.shape)
rel = np.linalg.norm(e - r, axis=1) / np.linalg.norm(r, axis=1)
top1 = np.mean(np.argmax(e, axis=1) == np.argmax(r, axis=1))
print("max rel_l2 %.3g  median %.3g  top-1 %.1f %%" % (rel.max(), np.median(rel), 100 * top1))
sys.exit(0 if rel.max() <= 5e-5 and top1 >= 0.99 else 1)
PYEOF
    then ok "$label ($(cat "$T/cmp.log"))"; else bad "$label"; sed 's/^/    /' "$T/cmp.log"; fi
}
mx_noqat seq_040 "(1) noqat mxfp4 seq_040 prefill"
mx_noqat seq_300 "(1) noqat mxfp4 seq_300 prefill"
mx_noqat seq_300 "(1) noqat mxfp4 seq_300 decode-only" --decode-only
mx_noqat seq_300 "(1) noqat mxfp4 seq_300 split 37" --split 37
for kt in scalar avx2 avx512 avx512-packed amx; do
    if ! "${DS4_BUILD_DIR:-build}"/tests/test_kernels --has-table $kt > /dev/null 2>&1; then
        echo "info: table $kt not available on this CPU (mxfp4)"; continue
    fi
    DS4_KERNELS=$kt mx_noqat $mx_kern_seq "(1) noqat mxfp4 $mx_kern_seq with DS4_KERNELS=$kt"
    DS4_KERNELS=$kt run mxfp4 $mx_kern_seq "$T/kp.f32" && DS4_KERNELS=$kt run mxfp4 $mx_kern_seq "$T/kd.f32" --decode-only && \
        cmp -s "$T/kp.f32" "$T/kd.f32" && ok "mxfp4 DS4_KERNELS=$kt: decode == prefill (bitwise)" \
        || bad "mxfp4 DS4_KERNELS=$kt: decode differs from prefill"
done
teach mxfp4 "(4) teacher mxfp4 QAT on (emulate-ds4)" -- --emulate-ds4
teach mxfp4 "(4) teacher mxfp4 --no-qat" --no-qat -- --no-qat

# Refusals before any compute: wrong family, broken tensor directory.
$PY - "$G/models/tiny-a-f16.gguf" "$T" <<'PYEOF'
import struct, sys
src, out = sys.argv[1], sys.argv[2]
b = bytearray(open(src, "rb").read())
pat = struct.pack("<Q", 9) + b"deepseek4"
i = b.index(pat)
w = bytearray(b); w[i + 8:i + 17] = b"llama4xyz"
open(out + "/family.gguf", "wb").write(w)
name = b"blk.3.attn_q_b.weight"
j = b.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
nd = struct.unpack_from("<I", b, j)[0]
d0 = struct.unpack_from("<Q", b, j + 4)[0]
w = bytearray(b); struct.pack_into("<Q", w, j + 4, d0 * 2)
open(out + "/dims.gguf", "wb").write(w)
open(out + "/trunc.gguf", "wb").write(b[: len(b) // 2])
# MXFP4 is accepted for the routed experts only: an attention matrix of
# that type (the data still fits: 17 bytes per 32 values < Q8_0's 34)
m = bytearray(open(src.replace("tiny-a-f16", "tiny-a-mxfp4"), "rb").read())
name = b"blk.0.attn_q_a.weight"
j = m.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
nd = struct.unpack_from("<I", m, j)[0]
struct.pack_into("<I", m, j + 4 + 8 * nd, 39)
open(out + "/mxattn.gguf", "wb").write(m)
PYEOF
refuse() {  # refuse FILE EXPECTED-FRAGMENT LABEL
    if $BD/ds4 -q -m "$1" --tokens 0,1,2 -n 0 > "$T/r.log" 2>&1; then
        bad "$3: accepted"
    elif grep -qF -- "$2" "$T/r.log"; then ok "$3"
    else bad "$3: unexpected message"; sed 's/^/    /' "$T/r.log"; fi
}
refuse "$T/family.gguf" 'expected "deepseek4"' "wrong model family refused"
refuse "$T/dims.gguf" "blk.3.attn_q_b.weight has dims" "misshaped tensor refused"
refuse "$T/trunc.gguf" "trunc.gguf" "truncated file refused"
refuse "$T/mxattn.gguf" "blk.0.attn_q_a.weight has type MXFP4, expected one of" "MXFP4 outside the routed experts refused"

echo "t_oracle: $fail failure(s)"
[ "$fail" -eq 0 ]
