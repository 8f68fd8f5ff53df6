#!/usr/bin/env bash
# t_glm_tokenizer.sh -- ds4's GLM pre-tokenizer (tokenizer.ggml.pre =
# "glm4") against llama.cpp's tokenizer (the release of
# bench/llamacpp/setup.sh, driven by tests/llamacpp_tok.c).  No GLM
# vocabulary is available offline, so tests/glm_vocab.py writes a synthetic
# one whose merges cross the pieces GLM's regex cuts (the pre-tokenizer
# decides the ids), and ~330 texts: the corpus, hand-picked strings and
# random ones.  `ds4 --tokenize --special` must give llama.cpp's ids for
# every text.  Skips, saying so, only when npm or its registry cannot be
# reached.
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"
T=$(mktemp -d "${TMPDIR:-/tmp}/ds4-glmtok.XXXXXX")
trap 'rm -rf "$T"' EXIT
[ -x "$BD/ds4" ] || { echo "t_glm_tokenizer: $BD/ds4 not built" >&2; exit 1; }

. tests/lib/llamacpp.sh
llamacpp_setup t_glm_tokenizer "$T/setup.log"
LLDIR=$(dirname "$(dirname "$LLAMA_LOGITS")")
${CC:-cc} -O1 -std=c11 -Wall -Wextra -I"$LLDIR/src/include" -I"$LLDIR/src/ggml/include" \
    -o "$T/llamacpp_tok" tests/llamacpp_tok.c -L"$GGML_BACKEND_DIR" -l:libllama.v0.5.0.so \
    -l:libggml.v0.5.0.so -l:libggml-base.so -Wl,-rpath,"$GGML_BACKEND_DIR" \
    || { echo "FAIL building tests/llamacpp_tok.c"; exit 1; }

mkdir -p "$T/cases"
/usr/bin/python3 tests/glm_vocab.py "$T/glm.gguf" "$T/cases" || { echo "FAIL tests/glm_vocab.py"; exit 1; }
"$T/llamacpp_tok" "$T/glm.gguf" "$T"/cases/*.txt > "$T/llama.out" || { echo "FAIL llamacpp_tok"; exit 1; }
: > "$T/ds4.out"
for f in "$T"/cases/*.txt; do
    "$BD/ds4" -m "$T/glm.gguf" --special --prompt-file "$f" --tokenize >> "$T/ds4.out" 2>> "$T/ds4.err" \
        || { echo "FAIL ds4 --tokenize on $(basename "$f")"; cat "$T/ds4.err"; exit 1; }
done
n=$(wc -l < "$T/llama.out")
if cmp -s "$T/llama.out" "$T/ds4.out"; then
    echo "ok   GLM pre-tokenizer: ds4 and llama.cpp give the same ids for $n texts"
    exit 0
fi
bad=$(diff <(nl "$T/llama.out") <(nl "$T/ds4.out") | grep -c '^<')
echo "FAIL GLM pre-tokenizer: $bad of $n texts tokenize differently; first:"
diff <(nl "$T/llama.out") <(nl "$T/ds4.out") | head -4
exit 1
