#!/usr/bin/env bash
# `make test-real`: the official DeepSeek API vectors
# (../shared/golden/official-logprobs) against the real model.  For each
# prompt: the rendered prompt's token count equals the API's prompt_tokens,
# the greedy tokens match by bytes, and the local top-20 logprobs agree
# with the official ones (tools/quality/check_logprobs.py: tolerances and
# why are in its docstring and docs/quality.md, "Validating a model").
# Without the real model (./ds4flash.gguf or DS4_MODEL) it says so and
# exits 0.  Not part of `make test`.
set -u
cd "$(dirname "$0")/../.."
S="${DS4_SHARED:-../shared}"
V="$S/golden/official-logprobs"
M="${DS4_MODEL:-./ds4flash.gguf}"
if [ ! -f "$M" ]; then
    echo "test-real: no real model at $M (set DS4_MODEL): skipped"
    exit 0
fi
[ -f "$V/manifest.json" ] || { echo "test-real: $V/manifest.json not found (set DS4_SHARED)"; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
while read -r id steps; do
    p="$V/prompts/$id.txt"
    n=$(./ds4 -m "$M" --nothink --dump-tokens --prompt-file "$p" | wc -l)
    if ! ./ds4 -q -m "$M" --nothink --temp 0 --ctx 8192 -n "$steps" --prompt-file "$p" \
            --dump-logprobs "$T/$id.json" --logprobs-top-k 20 > "$T/$id.out" 2> "$T/$id.err"; then
        echo "FAIL $id: ds4 failed"; sed 's/^/    /' "$T/$id.err"; fail=$((fail+1)); continue
    fi
    if /usr/bin/python3 tools/quality/check_logprobs.py "$V/official/$id.official.json" "$T/$id.json" \
            --prompt-tokens "$n" > "$T/$id.cmp" 2>&1; then
        echo "ok   $id"
    else
        echo "FAIL $id"; fail=$((fail+1))
    fi
    sed 's/^/    /' "$T/$id.cmp"
done < <(/usr/bin/python3 -c '
import json, sys
for p in json.load(open(sys.argv[1]))["prompts"]:
    print(p["id"], p["steps"])' "$V/manifest.json")
echo "test-real: $fail failure(s)"
[ "$fail" -eq 0 ]
