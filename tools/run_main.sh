#!/usr/bin/env bash
# `make run`: the main job.  Chats with ./ds4flash.gguf when it is present;
# otherwise creates (once) a small synthetic model with the real DeepSeek V4
# layout and vocabulary but RANDOM weights, and chats with that: it shows
# the whole stack working, but its text is meaningless.
#   make run                      interactive chat
#   make run PROMPT="Hello"       one answer, then exit
#   make run ARGS="--nothink -n 64"
# With the demo model each answer stops after 256 tokens (-n 256) so the
# first run takes seconds, not minutes of noise; an -n in ARGS comes later
# on the command line and wins.
set -eu
cd "$(dirname "$0")/.."
model=./ds4flash.gguf
demo_args=""
if [ ! -f "$model" ]; then
    model=demo/ds4-demo.gguf
    if [ ! -f "$model" ]; then
        echo "ds4: ./ds4flash.gguf not found; creating $model: a tiny synthetic"
        echo "ds4: DeepSeek V4 model with the real vocabulary and RANDOM weights (its output is noise)."
        mkdir -p demo
        ./ds4-synth --preset tiny --recipe q2 --vocab vocab/deepseek-v4-vocab.gguf -o "$model"
    fi
    echo "ds4: using the demo model $model (random weights: the text it writes is meaningless)."
    echo "ds4: answers are cut at 256 tokens (-n 256; ARGS=\"-n N\" for more)."
    demo_args="-n 256"
fi
if [ -n "${PROMPT:-}" ]; then
    exec ./ds4 -m "$model" $demo_args -p "$PROMPT" ${ARGS:-}
else
    exec ./ds4 -m "$model" $demo_args ${ARGS:-}
fi
