#!/usr/bin/env bash
# t_glm_ref.sh -- the GLM family's float64 references (tests/oracle/glm_ref.py)
# on tiny random-weight GGUFs in llama.cpp's layout (tests/glm_gguf.py),
# checked against llama.cpp's 2026-09 release where it implements the graph
# and against themselves where it does not (docs/family.md).  Skips, saying
# so, only when npm or its registry cannot be reached.
#
#  1. glm-dsa, exact mode: llama.cpp (F32 weights, flash attention off, F32
#     KV; bench/llamacpp/llama_logits) and the reference over 300 token ids.
#     The file has 4 layers (1 dense, 3 MoE; layer 3 a "shared" IndexShare
#     layer) and top-k 32, so 268 positions run an indexer selection.  Every
#     position before the first indexer tie must agree to 2e-5 (relative L2
#     over the row) with the same top-1, and at least 200 of them must have
#     selected.  Why 2e-5: the reference is float64 and llama.cpp float32;
#     the measured distance is ~1e-6 (max 1.1e-6 over the 300 rows), while
#     any graph difference (one row selected differently, a missing ReLU,
#     the other RoPE pairing, a wrong scale) moves rows by 1e-3 and more.
#     Ties: kept and rejected scores within 1e-5 relative (llama.cpp's
#     float32 scores are good to ~1e-6); tests/llamacpp_compare.py reports
#     them and ends the strict check there (llama.cpp's partial_sort breaks
#     ties in no defined order; ours: the lower index wins).
#  1b. ds4's own glm-dsa graph (src/models/glm_dsa.c) on the same file,
#     against llama.cpp directly: the same tolerance, tie rule and count.
#  2. Ties are found: the same with 8 indexer heads, where an exact tie (two
#     rows scoring 0, every head's ReLU at 0) happens; it must be reported
#     and the positions before it must agree.
#  3. The ambiguity FAMILY.md §3.3 flags: the reference without the
#     indexer's ReLU (HF glm_moe_dsa's reading) must disagree with
#     llama.cpp, so the check above decides it.
#  3b. IndexShare without attention.indexer.types: llama.cpp's defaults
#     (context >= 2^20: the GLM 5.2 pattern; shorter: every layer full) are
#     the reference's, checked as in 1.
#  3c. glm-dsa's NextN (MTP) block: llama.cpp's MTP context (llama_logits
#     mtp: the main model's normed states, then the block over the same
#     tokens with the state of p - 1 beside token p) against glm_ref.py
#     --mtp and against ds4's drafts (tests/test_glm_mtp.c), 2e-5 and the
#     same top-1 before the first indexer tie of the main model (measured
#     ~1.2e-6); with the block's own embed/norm/head tensors too.  The
#     main model's state before its output norm, or [hnorm(h); enorm(e)],
#     would be off by ~1 (relative).
#  4. glm5-next (no graph in this llama.cpp release): the reference against
#     itself on a 6-layer file (4 KDA, 2 DSA with the k-pool indexer, HC,
#     MoE with the clamp) over the same 300 ids: the KDA kernel's chunked
#     form (chunk 64) == its recurrent form, and one prefill (chunked) ==
#     one prefill (recurrent) == token by token with carried conv and
#     recurrent state == uneven chunks, to 1e-9 relative (float64 on both
#     sides; measured ~1e-14), with indexer selections among the positions;
#     and its mHC == the shared oracle's DeepSeek V4 mHC (1e-12).
#  5. The KDA math against llama.cpp: its kimi-linear graph (KDA with the
#     original gate -exp(A_log) softplus(.), MLA without RoPE) on a tiny
#     file (3 KDA layers, 1 MLA), the 300 ids in one decode and in decodes
#     of 37 (llama.cpp carrying its conv and recurrent state), against the
#     reference in that mode: 2e-5 and the same top-1, as in 1 (measured
#     ~2e-6); and the reference's own recurrent == chunked == steps checks.
# ds4-test: optimized-only (the references are Python and llama.cpp; ds4's glm-dsa graph runs under ASan in t_glm_engine)
set -u
cd "$(dirname "$0")/.." || exit 1
PY=/usr/bin/python3
T=$(mktemp -d "${TMPDIR:-/tmp}/ds4-glmref.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

. tests/lib/llamacpp.sh
llamacpp_setup t_glm_ref "$T/setup.log"

$PY -c "import random; r=random.Random(7); print(' '.join(str(r.randrange(10, 4090)) for _ in range(300)))" > "$T/ids300.txt"

# cross NAME FILE REF_ARGS COMPARE_ARGS: llama.cpp and the reference on FILE
# (LLARGS: extra llama_logits arguments)
cross() {
    local name=$1 f=$2 refargs=$3; shift 3
    # shellcheck disable=SC2086
    if ! "$LL" logits -m "$f" --tokens-file "$T/ids300.txt" -o "$T/$name.ll" -t 2 ${LLARGS:-} > "$T/$name.lllog" 2>&1; then
        bad "$name: llama.cpp failed:"; tail -5 "$T/$name.lllog"; return 1
    fi
    # shellcheck disable=SC2086
    if ! $PY tests/oracle/glm_ref.py "$f" --tokens-file "$T/ids300.txt" -o "$T/$name.ref" \
            --indexer "$T/$name.ix" $refargs > "$T/$name.reflog" 2>&1; then
        bad "$name: glm_ref.py failed:"; tail -5 "$T/$name.reflog"; return 1
    fi
    $PY tests/llamacpp_compare.py "$T/$name.ref" "$T/$name.ll" "$T/$name.ix" 4096 4 \
        --tol 2e-5 --tie-eps 1e-5 "$@" > "$T/$name.cmp" 2>&1
    local r=$?
    sed 's/^/     /' "$T/$name.cmp"
    return $r
}

# --- 1. glm-dsa, 16 indexer heads --------------------------------------
if $PY tests/glm_gguf.py glm-dsa "$T/dsa16.gguf" > "$T/gen.log" 2>&1; then
    if cross dsa16 "$T/dsa16.gguf" "" --min-selecting 200; then
        ok "glm-dsa: glm_ref.py == llama.cpp exact mode before the first indexer tie (300 tokens, top-k 32, a shared layer)"
    else bad "glm-dsa: glm_ref.py vs llama.cpp"; fi
else bad "glm_gguf.py glm-dsa:"; cat "$T/gen.log"; fi

# --- 2. ties are detected and reported ------------------------------------
# ds4's own glm-dsa graph against llama.cpp directly (t_glm_engine checks
# it against the reference): float32 both, the same tolerance and tie rule
BIN=${DS4_BIN_DIR:-.}
if [ -f "$T/dsa16.ll" ] && [ -f "$T/dsa16.ix" ]; then
    if "$BIN/ds4" -m "$T/dsa16.gguf" --tokens-file "$T/ids300.txt" --dump-logits "$T/dsa16.ds4" --ctx 512 \
            > "$T/dsa16.ds4log" 2>&1; then
        if $PY tests/llamacpp_compare.py "$T/dsa16.ds4" "$T/dsa16.ll" "$T/dsa16.ix" 4096 4 \
                --tol 2e-5 --tie-eps 1e-5 --min-selecting 200 > "$T/ds4ll.cmp" 2>&1; then
            sed 's/^/     /' "$T/ds4ll.cmp"
            ok "glm-dsa: ds4 == llama.cpp exact mode before the first indexer tie (300 tokens)"
        else sed 's/^/     /' "$T/ds4ll.cmp"; bad "glm-dsa: ds4 vs llama.cpp"; fi
    else bad "glm-dsa: ds4 failed on the tiny file:"; tail -5 "$T/dsa16.ds4log"; fi
fi

if $PY tests/glm_gguf.py glm-dsa "$T/dsa8.gguf" --set idx_head=8 > "$T/gen8.log" 2>&1; then
    if cross dsa8 "$T/dsa8.gguf" "" --min-selecting 100; then
        if grep -q '^indexer ties (kept and rejected within .*): [1-9][0-9]* positions, first: ' "$T/dsa8.cmp"; then
            ok "glm-dsa ties: found and reported with 8 indexer heads; the positions before the first agree"
        else bad "glm-dsa ties: none reported with 8 indexer heads (an exact zero tie is expected there)"; fi
    else bad "glm-dsa: glm_ref.py vs llama.cpp before the first tie (8 indexer heads)"; fi
else bad "glm_gguf.py glm-dsa --set idx_head=8:"; cat "$T/gen8.log"; fi

# --- 3. the indexer's ReLU is what llama.cpp computes ----------------------
if [ -f "$T/dsa16.gguf" ]; then
    if cross norelu "$T/dsa16.gguf" --no-indexer-relu --min-selecting 0 > /dev/null 2>&1; then
        bad "glm-dsa: the reference WITHOUT the indexer ReLU also agrees with llama.cpp (the check cannot tell)"
    elif grep -q 'exceed rel L2' "$T/norelu.cmp"; then
        ok "glm-dsa: without the indexer's ReLU the reference disagrees with llama.cpp (FAMILY.md §3.3 settled)"
    else bad "glm-dsa --no-indexer-relu: no comparison:"; tail -3 "$T/norelu.cmp"; fi
fi

# --- 3b. IndexShare from llama.cpp's defaults ------------------------------
for v in "1048576 glm52" "202752 allfull"; do
    # shellcheck disable=SC2086
    set -- $v
    if $PY tests/glm_gguf.py glm-dsa "$T/$2.gguf" --set write_types=0 --set ctx="$1" > "$T/gen$2.log" 2>&1; then
        if cross "$2" "$T/$2.gguf" "" --min-selecting 200 > /dev/null; then
            ok "glm-dsa without indexer.types, context $1: the default IndexShare pattern agrees with llama.cpp"
        else sed 's/^/     /' "$T/$2.cmp"; bad "glm-dsa without indexer.types, context $1"; fi
    else bad "glm_gguf.py glm-dsa (no types, context $1):"; cat "$T/gen$2.log"; fi
done

# --- 3c. the NextN (MTP) block against llama.cpp's MTP context -------------
# (its draft logits at every position: token p beside the main model's
# normed state after p - 1; with and without the block's own head tensors)
TM="${DS4_BUILD_DIR:-build}/tests/test_glm_mtp"
for nx in "n nextn=1" "nh nextn_head=1"; do
    # shellcheck disable=SC2086
    set -- $nx
    if $PY tests/glm_gguf.py glm-dsa "$T/$1.gguf" --set nextn=1 --set "$2" > "$T/gen$1.log" 2>&1 &&
            "$LL" mtp -m "$T/$1.gguf" --tokens-file "$T/ids300.txt" -o "$T/$1.llm" -t 2 > "$T/$1.lllog" 2>&1 &&
            $PY tests/oracle/glm_ref.py "$T/$1.gguf" --tokens-file "$T/ids300.txt" -o "$T/$1.main" \
                --indexer "$T/$1.ix" > "$T/$1.reflog" 2>&1 &&
            $PY tests/oracle/glm_ref.py "$T/$1.gguf" --tokens-file "$T/ids300.txt" --mtp "$T/$1.refm" \
                >> "$T/$1.reflog" 2>&1; then
        if $PY tests/llamacpp_compare.py "$T/$1.refm" "$T/$1.llm" "$T/$1.ix" 4096 4 --tol 2e-5 --tie-eps 1e-5 \
                --min-selecting 200 > "$T/$1.mcmp" 2>&1; then
            sed 's/^/     /' "$T/$1.mcmp"
            ok "glm-dsa NextN ($2): glm_ref.py --mtp == llama.cpp's MTP context before the first indexer tie"
        else sed 's/^/     /' "$T/$1.mcmp"; bad "glm-dsa NextN ($2): glm_ref.py --mtp vs llama.cpp"; fi
        if [ -x "$TM" ] && "$TM" "$T/$1.gguf" "$T/ids300.txt" "$T/$1.ds4m" "$T/$1.ch" "$T/$1.chd" > "$T/$1.tm" 2>&1 &&
                $PY tests/llamacpp_compare.py "$T/$1.ds4m" "$T/$1.llm" "$T/$1.ix" 4096 4 --tol 2e-5 --tie-eps 1e-5 \
                    --min-selecting 200 > "$T/$1.dcmp" 2>&1; then
            ok "glm-dsa NextN ($2): ds4's draft logits == llama.cpp's MTP context before the first indexer tie"
        else sed 's/^/     /' "$T/$1.dcmp" 2>/dev/null; tail -3 "$T/$1.tm"; bad "glm-dsa NextN ($2): ds4 vs llama.cpp"; fi
    else bad "glm-dsa NextN ($2): a step failed:"; tail -3 "$T/gen$1.log" "$T/$1.lllog" "$T/$1.reflog"; fi
done

# --- 4. glm5-next: recurrent == chunked, prefill == steps == chunks -------
if $PY tests/glm_gguf.py glm5-next "$T/g5n.gguf" > "$T/gen5.log" 2>&1; then
    if $PY tests/oracle/glm_ref.py "$T/g5n.gguf" --self-test --tokens-file "$T/ids300.txt" > "$T/g5n.log" 2>&1; then
        sed 's/^/     /' "$T/g5n.log"
        ok "glm5-next: mHC == V4's; KDA chunked == recurrent; prefill == token by token == uneven chunks (300 tokens)"
    else sed 's/^/     /' "$T/g5n.log"; bad "glm5-next self-test"; fi
else bad "glm_gguf.py glm5-next:"; cat "$T/gen5.log"; fi

# --- 5. the KDA math against llama.cpp's kimi-linear -----------------------
if $PY tests/glm_gguf.py kimi-linear "$T/kimi.gguf" > "$T/genk.log" 2>&1; then
    if cross kimi "$T/kimi.gguf" "" --min-selecting 0; then
        ok "kimi-linear: glm_ref.py's KDA == llama.cpp's (300 tokens in one decode)"
    else bad "kimi-linear: glm_ref.py vs llama.cpp (one decode)"; fi
    if LLARGS="--batch 37" cross kimi37 "$T/kimi.gguf" "" --min-selecting 0; then
        ok "kimi-linear: glm_ref.py's KDA == llama.cpp's carried state (decodes of 37 tokens)"
    else bad "kimi-linear: glm_ref.py vs llama.cpp (decodes of 37)"; fi
    if $PY tests/oracle/glm_ref.py "$T/kimi.gguf" --self-test --tokens-file "$T/ids300.txt" > "$T/kimi.self" 2>&1; then
        ok "kimi-linear: KDA chunked == recurrent; prefill == token by token == uneven chunks"
    else sed 's/^/     /' "$T/kimi.self"; bad "kimi-linear self-test"; fi
else bad "glm_gguf.py kimi-linear:"; cat "$T/genk.log"; fi

[ $fail = 0 ] && echo "t_glm_ref: all passed" || echo "t_glm_ref: $fail failed"
[ $fail = 0 ]
