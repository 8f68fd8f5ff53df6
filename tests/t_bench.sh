#!/usr/bin/env bash
# t_bench.sh -- tests of ds4-bench (tools/ds4_bench.c), run from the repo
# root by tests/run.sh.  On a tiny synthesized model: the CSV header and
# rows, positive numbers, growing kv_bytes, the SVG plot, that the tokens
# generated after snapshot/restore and incremental prefill equal those of
# other frontier schedules, chunk sizes and an uninterrupted prefill, the
# context_length warning, Ctrl+C (partial rows, plot, exit 130), --parallel
# (CSV, every stream's tokens the same for every N), bad arguments, and a
# glm-dsa model (no snapshots: frontiers by rewinding).  One worker thread (the machine is shared), well under 30 s.
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin under DEBUG=1)
SHARED="${DS4_SHARED:-../shared}"
VOCAB="$SHARED/vocab/mini-vocab.gguf"
TEXT=bench/data/italian_sample.txt
HEADER="ctx,prefill_tokens,prefill_tps,decode_tokens,decode_tps,kv_bytes,weight_bytes_per_token"
fail=0
ok()  { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

for b in ds4-bench ds4-synth; do
    [ -x $BD/$b ] || { echo "FAIL $BD/$b not built (make)"; exit 1; }
done
T=$(mktemp -d "${TMPDIR:-/tmp}/t_bench.XXXXXX")
trap 'rm -rf "$T"' EXIT

M="$T/m.gguf"
$BD/ds4-synth --preset tiny --recipe q2 --vocab "$VOCAB" -o "$M" > "$T/synth.txt" 2>&1 ||
    { cat "$T/synth.txt"; echo "FAIL cannot synthesize the tiny model"; exit 1; }
B0=($BD/ds4-bench -m "$M" --prompt-file "$TEXT" -t 1 --no-warmup)
B=("${B0[@]}" --no-probe)   # machine figures: measured in run A only

# gen_ids ERRFILE CTX -> the ids generated at frontier CTX (from --verbose)
gen_ids() { sed -n "s/^ds4-bench: gen ctx=$2: //p" "$1"; }

# check_csv FILE LABEL N_ROWS "ctx list" "prefill_tokens list" GEN
check_csv() {
    local f=$1 label=$2 n=$3 ctxs=$4 pts=$5 gen=$6
    if [ "$(head -n 1 "$f")" = "$HEADER" ]; then ok "$label: CSV header"
    else bad "$label: CSV header is '$(head -n 1 "$f")'"; fi
    local rows=$(($(wc -l < "$f") - 1))
    if [ "$rows" -eq "$n" ]; then ok "$label: $n rows"; else bad "$label: $rows rows, expected $n"; fi
    if awk -F, -v ctxs="$ctxs" -v pts="$pts" -v gen="$gen" '
        NR == 1 { split(ctxs, C, " "); split(pts, P, " "); next }
        {
            i = NR - 1
            if (NF != 7) { print "row " i ": " NF " fields"; bad = 1 }
            for (k = 1; k <= 7; k++)
                if ($k !~ /^[0-9]+(\.[0-9]+)?$/ || $k + 0 <= 0) { print "row " i " field " k " not positive: " $k; bad = 1 }
            if ($1 != C[i]) { print "row " i ": ctx " $1 ", expected " C[i]; bad = 1 }
            if ($2 != P[i]) { print "row " i ": prefill_tokens " $2 ", expected " P[i]; bad = 1 }
            if ($4 != gen) { print "row " i ": decode_tokens " $4 ", expected " gen; bad = 1 }
            if (i > 1 && $6 + 0 <= kv) { print "row " i ": kv_bytes " $6 " does not grow (" kv ")"; bad = 1 }
            if (i > 1 && $7 != wb) { print "row " i ": weight_bytes_per_token changes"; bad = 1 }
            kv = $6 + 0; wb = $7
        }
        END { exit bad }' "$f" > "$T/awk.txt"; then ok "$label: values positive, ctx/prefill/decode counts right, kv_bytes grows"
    else bad "$label: values:"; sed 's/^/     /' "$T/awk.txt"; fi
}

check_svg() {   # check_svg FILE LABEL
    local f=$1 label=$2
    if [ ! -s "$f" ]; then bad "$label: no plot"; return; fi
    if command -v xmllint >/dev/null 2>&1; then
        if xmllint --noout "$f" 2> "$T/xml.txt"; then ok "$label: plot is well-formed XML (xmllint)"
        else bad "$label: plot is not well-formed:"; head -5 "$T/xml.txt"; fi
    fi
    if head -c 300 "$f" | grep -q '<svg ' && tail -n 1 "$f" | grep -q '</svg>' &&
       [ "$(grep -c '<polyline' "$f")" -eq 2 ] && grep -q 'ds4-synth-tiny-q2' "$f" &&
       grep -q 'prefill tokens/s' "$f" && grep -q 'decode tokens/s' "$f"; then
        ok "$label: plot has <svg>..</svg>, two series, title and labels"
    else bad "$label: plot content"; fi
}

# --- A: 64..512 x2 --------------------------------------------------------
if "${B0[@]}" --ctx-start 64 --ctx-max 512 --step-mul 2 --gen-tokens 4 --verbose \
        --plot "$T/a.svg" > "$T/a.csv" 2> "$T/a.err"; then ok "A: 64..512 x2 ran"
else bad "A: exit $?:"; tail -5 "$T/a.err"; fi
check_csv "$T/a.csv" A 4 "64 128 256 512" "64 64 128 256" 4
check_svg "$T/a.svg" A
if [ "$(grep -c 'snapshot .* MB: save [0-9]* MB/s, restore [0-9]* MB/s' "$T/a.err")" -eq 4 ]; then
    ok "A: snapshot save/restore MB/s on stderr for every frontier"
else bad "A: snapshot speeds missing on stderr"; fi
# machine figures before/after, per-frontier ratios, the summary
if grep -q '^ds4-bench: machine figures (1 thread, before): STREAM read [0-9.]* GB/s, triad [0-9.]* GB/s; .* peak [0-9]* GOP/s; decode roofline [0-9.]* tok/s' "$T/a.err" &&
   grep -q '^ds4-bench: machine figures (after): STREAM read [0-9.]* GB/s' "$T/a.err" &&
   [ "$(grep -c '^ds4-bench: ctx [0-9]*: prefill [0-9]* GFLOP/s of layer matmuls = [0-9]* % of the int8 peak | decode [0-9.]* GB/s of weights = [0-9]* % of STREAM read' "$T/a.err")" -eq 4 ] &&
   grep -q '^ds4-bench: summary (medians over 4 frontiers.*prefill [0-9]* GFLOP/s = [0-9]* % of the int8 peak; decode [0-9.]* GB/s = [0-9]* % of the roofline' "$T/a.err"; then
    ok "A: machine figures, per-frontier peak/roofline ratios and the summary on stderr"
else bad "A: machine figures or ratios missing:"; grep -E 'machine|GFLOP|summary' "$T/a.err" | head -8; fi
if ! grep -q 'MB/s' "$T/a.csv"; then ok "A: stdout is pure CSV"; else bad "A: extra text on stdout"; fi

# --- B: 64..512 +64, chunk 40: the same tokens at the common frontiers ----
if "${B[@]}" --ctx-start 64 --ctx-max 512 --step-incr 64 --gen-tokens 4 --chunk 40 --verbose \
        --plot "$T/b.svg" > "$T/b.csv" 2> "$T/b.err"; then ok "B: 64..512 +64 chunk 40 ran"
else bad "B: exit $?:"; tail -5 "$T/b.err"; fi
if [ -s "$T/b.err" ] && ! grep -q 'machine figures\|GFLOP' "$T/b.err"; then ok "B (--no-probe): no machine figures"
else bad "B (--no-probe): machine figures measured anyway"; fi
check_csv "$T/b.csv" B 8 "64 128 192 256 320 384 448 512" "64 64 64 64 64 64 64 64" 4
check_svg "$T/b.svg" B
same=1
for c in 64 128 256 512; do
    a=$(gen_ids "$T/a.err" $c); b=$(gen_ids "$T/b.err" $c)
    if [ -z "$a" ] || [ "$a" != "$b" ]; then same=0; echo "     ctx $c: A [$a] B [$b]"; fi
done
if [ $same = 1 ]; then ok "A = B: generated tokens independent of frontier schedule and chunk size"
else bad "A != B: generated tokens differ between schedules"; fi

# --- C: one frontier at 512: uninterrupted prefill ------------------------
if "${B[@]}" --ctx-start 512 --ctx-max 512 --gen-tokens 4 --chunk 100 --verbose \
        > "$T/c.csv" 2> "$T/c.err"; then ok "C: single frontier 512 ran"
else bad "C: exit $?:"; tail -5 "$T/c.err"; fi
check_csv "$T/c.csv" C 1 "512" "512" 4
a=$(gen_ids "$T/a.err" 512); c=$(gen_ids "$T/c.err" 512)
if [ -n "$a" ] && [ "$a" = "$c" ]; then ok "A = C: restore-then-continue equals an uninterrupted prefill ($c)"
else bad "A != C at 512: [$a] vs [$c]"; fi

# --- context_length warning ----------------------------------------------
M2="$T/m128.gguf"
$BD/ds4-synth --preset tiny --recipe q2 --vocab "$VOCAB" --set context_length=128 -o "$M2" > /dev/null 2>&1
if $BD/ds4-bench -m "$M2" --prompt-file "$TEXT" -t 1 --no-warmup --ctx-start 64 --ctx-max 128 \
        --gen-tokens 2 > "$T/w.csv" 2> "$T/w.err" && grep -q "WARNING.*context_length (128)" "$T/w.err"; then
    ok "frontier beyond context_length: warning, run completes"
else bad "context_length warning:"; tail -5 "$T/w.err"; fi

# --- Ctrl+C: partial rows, the plot, exit 130 -----------------------------
"${B[@]}" --ctx-start 64 --ctx-max 4000 --step-incr 64 --gen-tokens 2 --plot "$T/i.svg" \
    > "$T/i.csv" 2> "$T/i.err" &
pid=$!
for _ in $(seq 100); do
    [ "$(wc -l < "$T/i.csv")" -ge 3 ] && break
    sleep 0.1
done
kill -INT $pid 2>/dev/null
wait $pid; rc=$?
rows=$(($(wc -l < "$T/i.csv") - 1))
if [ $rc -eq 130 ] && [ $rows -ge 2 ] && [ $rows -lt 62 ] && grep -q interrupted "$T/i.err"; then
    ok "SIGINT: exit 130 after $rows rows"
else bad "SIGINT: exit $rc, $rows rows"; tail -3 "$T/i.err"; fi
check_svg "$T/i.svg" "SIGINT"

# --- --parallel: N streams decoded with the batched step -------------------
PH="parallel,ctx,decode_tokens,step_ms,aggregate_tps,per_stream_tps,aggregate_x,per_stream_x,weight_mb_per_step,weight_mb_n_single"
if "${B[@]}" --ctx-start 40 --gen-tokens 4 --chunk 16 --parallel 1,3,2 --rounds 1 > "$T/par.csv" 2> "$T/par.err"; then
    if [ "$(head -n 1 "$T/par.csv")" = "$PH" ] && [ "$(wc -l < "$T/par.csv")" -eq 4 ] &&
       awk -F, 'NR == 1 { next }
                { if (NF != 10) bad = 1
                  for (k = 1; k <= 10; k++) if ($k !~ /^[0-9]+(\.[0-9]+)?$/ || $k + 0 <= 0) bad = 1
                  if ($2 != 40 || $3 != 4) bad = 1
                  n[NR] = $1; w[NR] = $9; s[NR] = $10 }
                END { if (n[2] != 1 || n[3] != 3 || n[4] != 2) bad = 1
                      if (w[2] != s[2]) bad = 1            # one stream: one step of weights
                      if (!(w[3] < s[3] && w[4] < s[4])) bad = 1
                      exit bad }' "$T/par.csv"; then
        ok "--parallel: CSV header, one row per N in list order, positive values, fewer weight bytes than N single steps"
    else bad "--parallel CSV:"; sed 's/^/     /' "$T/par.csv"; fi
    if grep -q "greedy tokens are the same for every N" "$T/par.err"; then ok "--parallel: every stream's tokens are the same for every N"
    else bad "--parallel: no batched == alone line: $(tail -3 "$T/par.err")"; fi
else bad "--parallel run failed: $(tail -3 "$T/par.err")"; fi

# --- bad arguments ----------------------------------------------------------
expect_fail() {   # expect_fail CODE "PATTERN" LABEL ARGS...
    local code=$1 pat=$2 label=$3; shift 3
    "$@" > "$T/bad.out" 2> "$T/bad.err"
    local rc=$?
    if [ $rc -eq "$code" ] && grep -qi -- "$pat" "$T/bad.err" && [ ! -s "$T/bad.out" ]; then
        ok "bad args: $label -> exit $rc"
    else bad "bad args: $label -> exit $rc (want $code), stderr: $(head -2 "$T/bad.err")"; fi
}
P=(--prompt-file "$TEXT")
expect_fail 2 "prompt-file" "no --prompt-file" $BD/ds4-bench -m "$M"
expect_fail 2 "exclusive" "--step-incr with --step-mul" $BD/ds4-bench -m "$M" "${P[@]}" --step-incr 4 --step-mul 2
expect_fail 2 "ctx-max" "--ctx-max < --ctx-start" $BD/ds4-bench -m "$M" "${P[@]}" --ctx-start 128 --ctx-max 64
expect_fail 2 "ctx-start" "--ctx-start 0" $BD/ds4-bench -m "$M" "${P[@]}" --ctx-start 0
expect_fail 2 "gen-tokens" "--gen-tokens 0" $BD/ds4-bench -m "$M" "${P[@]}" --gen-tokens 0
expect_fail 2 "step-mul" "--step-mul 1" $BD/ds4-bench -m "$M" "${P[@]}" --step-mul 1
expect_fail 2 "step-incr" "--step-incr 0" $BD/ds4-bench -m "$M" "${P[@]}" --step-incr 0
expect_fail 2 "integer" "--ctx-max abc" $BD/ds4-bench -m "$M" "${P[@]}" --ctx-max abc
expect_fail 2 "needs a value" "--chunk without value" $BD/ds4-bench -m "$M" "${P[@]}" --chunk
expect_fail 2 "unknown option" "unknown option" $BD/ds4-bench -m "$M" "${P[@]}" --frobnicate
expect_fail 2 "cannot open the model" "missing model" $BD/ds4-bench -m "$T/nope.gguf" "${P[@]}"
expect_fail 2 "cannot read the prompt file" "missing text" $BD/ds4-bench -m "$M" --prompt-file "$T/nope.txt"
: > "$T/empty.txt"
expect_fail 2 "empty" "empty text" $BD/ds4-bench -m "$M" --prompt-file "$T/empty.txt"
expect_fail 2 "cannot write the plot" "unwritable plot" $BD/ds4-bench -m "$M" "${P[@]}" --plot "$T/no/dir/p.svg"
expect_fail 2 "parallel" "--parallel 0" $BD/ds4-bench -m "$M" "${P[@]}" --parallel 0
expect_fail 2 "parallel" "--parallel 1,x" $BD/ds4-bench -m "$M" "${P[@]}" --parallel 1,x
expect_fail 2 "parallel" "--parallel 65" $BD/ds4-bench -m "$M" "${P[@]}" --parallel 65
expect_fail 2 "rounds goes with --parallel" "--rounds alone" $BD/ds4-bench -m "$M" "${P[@]}" --rounds 2
expect_fail 2 "concurrent decoding only" "--parallel with --spec" $BD/ds4-bench -m "$M" "${P[@]}" --parallel 2 --spec 2
expect_fail 1 "ds4-bench: " "not a GGUF" $BD/ds4-bench -m "$TEXT" "${P[@]}"

if $BD/ds4-bench --help > "$T/help.txt" 2>&1; then
    missing=""
    for o in -m --prompt-file --ctx-start --ctx-max --step-incr --step-mul --gen-tokens --threads \
             --chunk --plot --no-qat --no-warmup --verbose --parallel --rounds "$HEADER"; do
        grep -q -- "$o" "$T/help.txt" || missing="$missing $o"
    done
    if [ -z "$missing" ]; then ok "--help documents every option and the CSV header"
    else bad "--help lacks:$missing"; fi
else bad "--help exit status"; fi

# Pages of the weights.  Every GGUF writer (gguf_writer_close) drops its
# output from the page cache, so the first reader brings it back in large
# folios that the mapping (MADV_HUGEPAGE) can map with 2 MB pages; a copy
# made by cat stays cached in small pages, and ds4-bench warns about it.
# The 117 MB model (real vocabulary) holds enough 2 MB extents to tell.
W="$T/w.gguf"
if $BD/ds4-synth --preset tiny --recipe q2 -o "$W" > "$T/wsynth.txt" 2>&1; then
    fs=$(stat -f -c %T "$T" 2>/dev/null)
    if command -v fincore > /dev/null && [ "$fs" != tmpfs ]; then
        res=$(fincore -b -n -o RES "$W" 2>/dev/null | tr -d ' ')
        [ "$res" = 0 ] && ok "pages: ds4-synth's output is not left in the page cache" ||
            bad "pages: ds4-synth left $res bytes of its output cached"
    else
        echo "skip pages: no fincore or a tmpfs ($fs): the page cache cannot be checked"
    fi
    cat "$W" > "$T/w2.gguf"
    pct() { sed -n 's/^ds4-bench: weights: .* mapped, \([0-9]*\) % of them on 2 MB pages$/\1/p' "$1"; }
    $BD/ds4-bench -m "$W" --prompt-file "$TEXT" -t 1 --no-probe --ctx-start 64 --ctx-max 64 --gen-tokens 2 \
        > /dev/null 2> "$T/w1.err"
    $BD/ds4-bench -m "$T/w2.gguf" --prompt-file "$TEXT" -t 1 --no-probe --ctx-start 64 --ctx-max 64 --gen-tokens 2 \
        > /dev/null 2> "$T/w2.err"
    p1=$(pct "$T/w1.err") p2=$(pct "$T/w2.err")
    if [ -n "$p1" ] && [ -n "$p2" ]; then
        ok "pages: ds4-bench reports the weights' pages ($p1 % and $p2 % on 2 MB pages)"
        if [ "$p1" -ge 50 ]; then
            [ "$p2" -lt "$p1" ] && grep -q "warning: most weights are mapped with 4 KB pages" "$T/w2.err" &&
                ! grep -q "warning: most weights" "$T/w1.err" &&
                ok "pages: the written model maps with 2 MB pages, a cached copy does not and is warned about" ||
                bad "pages: $p1 % vs $p2 %, or the warning is wrong: $(grep weights "$T/w1.err" "$T/w2.err")"
        else
            echo "skip pages: this kernel mapped no file with 2 MB pages ($p1 %; THP off, or no large folios in this filesystem)"
        fi
    elif [ ! -r /proc/self/smaps ]; then
        echo "skip pages: no /proc/self/smaps"
    else
        bad "pages: no 'weights:' line: $(tail -n 3 "$T/w1.err")"
    fi
else
    bad "pages: cannot synthesize the 117 MB model: $(tail -n 2 "$T/wsynth.txt")"
fi

# glm-dsa (its own snapshot format, GLMS): the tokens at 128 after going
# back to the frontier at 64 equal those of a single frontier at 128
G="$T/glm.gguf"
if $BD/ds4-synth --arch glm-dsa --preset tiny --recipe q8_0 --vocab "$VOCAB" -o "$G" > "$T/gsynth.txt" 2>&1; then
    GB=($BD/ds4-bench -m "$G" --prompt-file "$TEXT" -t 1 --no-warmup --no-probe)
    if "${GB[@]}" --ctx-start 64 --ctx-max 128 --step-incr 64 --gen-tokens 4 --verbose \
            > "$T/g1.csv" 2> "$T/g1.err" &&
            "${GB[@]}" --ctx-start 128 --ctx-max 128 --gen-tokens 4 --verbose > "$T/g2.csv" 2> "$T/g2.err" &&
            [ "$(grep -c '^[0-9]' "$T/g1.csv")" = 2 ] &&
            [ -n "$(gen_ids "$T/g1.err" 128)" ] && [ "$(gen_ids "$T/g1.err" 128)" = "$(gen_ids "$T/g2.err" 128)" ]; then
        ok "glm-dsa: two frontiers, the tokens at 128 == a single frontier's"
    else
        bad "glm-dsa frontiers: $(tail -n 3 "$T/g1.err" "$T/g2.err")"
    fi
else
    bad "glm-dsa: cannot synthesize the tiny model: $(tail -n 2 "$T/gsynth.txt")"
fi

[ $fail = 0 ] && echo "t_bench: all ok" || echo "t_bench: FAILED"
exit $fail
