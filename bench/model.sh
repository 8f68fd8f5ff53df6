# bench/model.sh -- sourced by bench/run.sh and bench/llamacpp.sh: picks the
# benchmark model into MODEL: $BENCH_MODEL, else ./ds4flash.gguf, else the
# synthetic bench/models/medium-q2.gguf (the real Flash per-layer shape, 4
# layers, q2 recipe, the real vocabulary, RANDOM weights, ~9.5 GB), made
# once by ./ds4-synth after a free-space check (remade when ds4-synth would
# now write a different size).  Needs say, die and SHARED from the caller.
bench_model() {
    if [ -n "${BENCH_MODEL:-}" ]; then
        MODEL=$BENCH_MODEL
        [ -r "$MODEL" ] || die "BENCH_MODEL=$MODEL is not a readable file"
        say "model: $MODEL (BENCH_MODEL)"
    elif [ -f ./ds4flash.gguf ]; then
        MODEL=./ds4flash.gguf
        say "model: $MODEL"
    else
        MODEL=bench/models/medium-q2.gguf
        VOCAB=vocab/deepseek-v4-vocab.gguf
        [ -f "$VOCAB" ] || VOCAB=$SHARED/vocab/deepseek-v4-vocab.gguf
        [ -r "$VOCAB" ] || die "no vocabulary: neither vocab/deepseek-v4-vocab.gguf nor $SHARED/vocab/deepseek-v4-vocab.gguf"
        SYNTH=(./ds4-synth --preset medium --recipe q2 --layers 4 --vocab "$VOCAB")
        # the exact size the current ds4-synth writes (a stale file is remade)
        want=$("${SYNTH[@]}" --dry-run | sed -n 's/^file size: \([0-9]*\) bytes.*/\1/p')
        [ -n "$want" ] || die "ds4-synth --dry-run did not report the file size"
        have=$(stat -c %s "$MODEL" 2>/dev/null || echo 0)
        if [ "$have" = "$want" ]; then
            say "model: $MODEL (synthetic, made earlier by ds4-synth: random weights)"
        else
            say "./ds4flash.gguf not found: the bench uses a synthetic model instead,"
            say "  $MODEL: the real DeepSeek V4 Flash per-layer shape (n_embd 4096,"
            say "  64 heads x 512, 256 experts x 2048), 4 layers, q2 recipe, the real"
            say "  vocabulary ($VOCAB), RANDOM weights: its speed is representative"
            say "  per layer, its text is noise."
            [ "$have" = 0 ] || say "  (the existing $MODEL has $have bytes, ds4-synth now writes $want: remaking it)"
            mkdir -p bench/models
            avail=$(df -B1 --output=avail bench/models | tail -n 1 | tr -d ' ')
            need=$((want + (1 << 30)))
            if [ "$avail" -lt "$need" ]; then
                die "$(awk -v a="$avail" -v w="$want" 'BEGIN { printf "not enough disk space in bench/models: %.1f GB free, the model needs %.1f GB (+1 GB margin)", a / 1e9, w / 1e9 }')
      free some space, or put a real model at ./ds4flash.gguf, or set BENCH_MODEL=FILE"
            fi
            say "$(awk -v a="$avail" -v w="$want" 'BEGIN { printf "writing %.1f GB (%.1f GB free on that disk); this takes a minute or two...", w / 1e9, a / 1e9 }')"
            rm -f "$MODEL"
            "${SYNTH[@]}" -o "$MODEL"
        fi
    fi
}
