# tests/lib/llamacpp.sh -- llama.cpp for a script test (sourced): its
# 2026-09 release from the npm package node-llama-cpp@3.22.1, installed
# into a cache by bench/llamacpp/setup.sh.
#
#   llamacpp_setup NAME LOG   install (or find) it; sets LLAMA_LOGITS,
#                             LL (the same) and exports GGML_BACKEND_DIR.
#                             When npm or its registry cannot be reached
#                             (setup.sh exits 3) prints "skip NAME: ..." and
#                             exits 0 -- the one skip these tests allow; any
#                             other failure prints the log and exits 1.
llamacpp_setup() {
    local name="$1" log="$2" env rc
    env=$(bench/llamacpp/setup.sh 2> "$log")
    rc=$?
    if [ $rc = 3 ]; then
        echo "skip $name: llama.cpp could not be installed from npm: $(tail -n 1 "$log")"
        exit 0
    elif [ $rc != 0 ]; then
        cat "$log"; echo "FAIL bench/llamacpp/setup.sh (exit $rc)"; exit 1
    fi
    eval "$env"
    export GGML_BACKEND_DIR
    LL="$LLAMA_LOGITS"
}
