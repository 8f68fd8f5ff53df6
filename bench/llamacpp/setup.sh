#!/usr/bin/env bash
# bench/llamacpp/setup.sh -- llama.cpp beside ds4, for the side-by-side
# benchmark (bench/llamacpp.sh) and the logits cross-check
# (tests/t_llamacpp.sh).  Nothing of it is linked into ds4.
#
#   bench/llamacpp/setup.sh [--server]
#
# Installs, into $LLAMACPP_DIR (default build/llamacpp, ignored by git):
#   npm/      the npm packages node-llama-cpp@3.22.1 and
#             @node-llama-cpp/linux-x64@3.22.1 (--ignore-scripts: nothing
#             is downloaded or built by their install scripts).  The first
#             carries llama.cpp's 2026-09 release as a git bundle, the
#             second its prebuilt CPU libraries (libllama, libggml and one
#             libggml-cpu-*.so per x86 level; the best is picked at run
#             time).
#   src/      that release's source, cloned from the bundle (the headers
#             for bin/llama_logits; the source for --server).
#   bin/llama_logits   bench/llamacpp/llama_logits.c built against the
#             prebuilt libraries (rpath to them).
#   --server: also bin/llama-server, built from src/ with cmake (CPU,
#             GGML_NATIVE, Release) into server-build/: ~10-20 minutes on 2
#             cores the first time, then reused.
# Prints the environment to use on stdout (eval-able lines):
#   LLAMA_LOGITS=... GGML_BACKEND_DIR=... [LLAMA_SERVER=...]
# Exits 3 (and says why on stderr) when npm or the registry is not
# reachable, so tests can skip; any other failure exits 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
DIR=${LLAMACPP_DIR:-build/llamacpp}
NLC_VERSION=3.22.1
WANT_SERVER=0
[ "${1:-}" = "--server" ] && WANT_SERVER=1

say() { echo "llamacpp-setup: $*" >&2; }
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
# one setup at a time (both test passes may start it at once)
exec 9>"$DIR/.lock"
flock 9

LIBS="$DIR/npm/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
BUNDLE="$DIR/npm/node_modules/node-llama-cpp/llama/gitRelease.bundle"
if [ ! -f "$LIBS/libllama.v0.5.0.so" ] || [ ! -f "$BUNDLE" ]; then
    command -v npm >/dev/null 2>&1 || { say "npm not found"; exit 3; }
    mkdir -p "$DIR/npm"
    [ -f "$DIR/npm/package.json" ] || echo '{"name":"ds4-llamacpp","private":true}' > "$DIR/npm/package.json"
    say "installing node-llama-cpp@$NLC_VERSION (npm, --ignore-scripts)"
    if ! (cd "$DIR/npm" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error \
            "node-llama-cpp@$NLC_VERSION" "@node-llama-cpp/linux-x64@$NLC_VERSION" >&2); then
        say "npm install failed (is the npm registry reachable?)"
        exit 3
    fi
fi
[ -f "$LIBS/libllama.v0.5.0.so" ] || { say "no prebuilt libllama in $LIBS"; exit 1; }

if [ ! -f "$DIR/src/include/llama.h" ]; then
    say "cloning llama.cpp's source from the package's git bundle"
    rm -rf "$DIR/src"
    git clone -q "$BUNDLE" "$DIR/src" 2>/dev/null || { say "git clone of $BUNDLE failed"; exit 1; }
fi

BIN="$DIR/bin"
mkdir -p "$BIN"
SRC_C="$ROOT/bench/llamacpp/llama_logits.c"
if [ ! -x "$BIN/llama_logits" ] || [ "$SRC_C" -nt "$BIN/llama_logits" ]; then
    say "building llama_logits"
    ${CC:-cc} -O2 -std=c11 -Wall -Wextra -D_GNU_SOURCE -I"$DIR/src/include" -I"$DIR/src/ggml/include" \
        -o "$BIN/llama_logits.tmp" "$SRC_C" -L"$LIBS" -l:libllama.v0.5.0.so -l:libggml.v0.5.0.so \
        -l:libggml-base.so -Wl,-rpath,"$LIBS"
    mv "$BIN/llama_logits.tmp" "$BIN/llama_logits"
fi
echo "LLAMA_LOGITS=$BIN/llama_logits"
echo "GGML_BACKEND_DIR=$LIBS"

if [ "$WANT_SERVER" = 1 ]; then
    if [ ! -x "$BIN/llama-server" ]; then
        command -v cmake >/dev/null 2>&1 || { say "cmake not found (apt-get install cmake)"; exit 1; }
        command -v c++ >/dev/null 2>&1 || { say "a C++ compiler is needed for llama-server (apt-get install g++)"; exit 1; }
        say "building llama-server from the release's source (cmake, Release, GGML_NATIVE=ON; once)"
        cmake -S "$DIR/src" -B "$DIR/server-build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
            -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF >&2
        cmake --build "$DIR/server-build" --target llama-server -j"$(nproc)" >&2
        cp "$DIR/server-build/bin/llama-server" "$BIN/llama-server.tmp"
        mv "$BIN/llama-server.tmp" "$BIN/llama-server"
    fi
    echo "LLAMA_SERVER=$BIN/llama-server"
fi
