#!/usr/bin/env bash
# A GGUF that is not a DeepSeek V4 model, given to every binary that loads
# a model (ds4, ds4-server, ds4-agent, ds4-bench, ds4-eval, ds4-steer,
# ds4-kv verify -m): each refuses it with one line that says what the file
# is (docs/quality.md "Validating a model", docs/GGUF.md §6), not the ~30 "missing
# metadata deepseek4.*" lines of the later checks:
#  - the vocabulary-only GGUF (../shared/vocab): "a vocabulary-only GGUF
#    (tokenizer "gpt2", N tokens, no weights): it cannot run as a model ...";
#  - a GGUF of another architecture (a small "llama" file written here):
#    the architecture found and the one supported.
# Exit status 1 or 2 (never a signal), at most 3 lines on stderr.
set -u
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin in the sanitizer pass)
cd "$(dirname "$0")/.."
S="${DS4_SHARED:-../shared}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail+1)); }

# a "llama" GGUF: two metadata keys, one F32 tensor
python3 - "$T/llama.gguf" <<'EOF'
import struct, sys
def s(b): return struct.pack('<Q', len(b)) + b
kv = [(b'general.architecture', s(b'llama')), (b'general.name', s(b'Tiny Llama'))]
h = b'GGUF' + struct.pack('<IQQ', 3, 1, len(kv))
for k, v in kv: h += s(k) + struct.pack('<I', 8) + v
h += s(b'token_embd.weight') + struct.pack('<IQIQ', 1, 8, 0, 0)
open(sys.argv[1], 'wb').write(h + b'\0' * ((-len(h)) % 32) + b'\0' * 32)
EOF
echo hello > "$T/prompt.txt"
mkdir -p "$T/kv"

run_all() {   # run_all FILE LABEL PATTERN...: every binary refuses FILE with one line matching every PATTERN
    local f="$1" label="$2"; shift 2
    local b
    for b in ds4 ds4-server ds4-agent ds4-bench ds4-eval ds4-steer ds4-kv; do
        case "$b" in
            ds4) "$BD"/ds4 -m "$f" -p hi ;;
            ds4-server) "$BD"/ds4-server -m "$f" --port 0 ;;
            ds4-agent) "$BD"/ds4-agent -m "$f" ;;
            ds4-bench) "$BD"/ds4-bench -m "$f" --prompt-file "$T/prompt.txt" ;;
            ds4-eval) "$BD"/ds4-eval -m "$f" ;;
            ds4-steer) "$BD"/ds4-steer build -m "$f" --positive "$T/prompt.txt" --negative "$T/prompt.txt" --layer 0 -o "$T/steer" ;;
            ds4-kv) "$BD"/ds4-kv verify "$T/kv" -m "$f" ;;
        esac > "$T/out" 2> "$T/err" < /dev/null
        local st=$? good=1 p
        [ "$st" -ge 1 ] && [ "$st" -le 2 ] || good=0
        [ "$(wc -l < "$T/err")" -le 3 ] || good=0
        for p in "$@"; do head -n 1 "$T/err" | grep -qF -- "$p" || good=0; done
        grep -qE "AddressSanitizer|runtime error|LeakSanitizer" "$T/err" && good=0
        if [ "$good" = 1 ]; then
            ok "$b, $label: exit $st, '$(head -n 1 "$T/err" | cut -c1-110)...'"
        else
            bad "$b, $label: exit $st, $(wc -l < "$T/err") lines:"; head -n 8 "$T/err"
        fi
    done
}

V="$S/vocab/deepseek-v4-vocab.gguf"
run_all "$V" "vocab-only" "$V: a vocabulary-only GGUF (tokenizer \"gpt2\", 129280 tokens, no weights): it cannot run as a model" \
    "ds4-synth --vocab" "-m needs a DeepSeek V4 model GGUF"
run_all "$S/vocab/mini-vocab.gguf" "mini vocab-only" "a vocabulary-only GGUF (tokenizer \"gpt2\", 4096 tokens, no weights)"
run_all "$T/llama.gguf" "llama" "llama.gguf: general.architecture is \"llama\", expected \"deepseek4\": this is a model of another family (\"Tiny Llama\")" \
    "ds4 runs only GGUFs of architecture \"deepseek4\" (DeepSeek V4 Flash and PRO)"

[ "$fail" = 0 ] && echo "t_notmodel: all passed" || echo "t_notmodel: $fail failed"
[ "$fail" = 0 ]
