#!/usr/bin/env bash
# `make fuzz`: builds the libFuzzer targets with clang (ASan + UBSan) and runs
# each for FUZZ_SECONDS (default 60).  Corpora live under build/fuzz/ and
# grow across runs.  A crash leaves its input in build/fuzz/ and fails.
set -u
cd "$(dirname "$0")/.."
secs="${FUZZ_SECONDS:-60}"
S="$(cd "${DS4_SHARED:-../shared}" && pwd)"
B=build/fuzz
mkdir -p "$B"
CF="-std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc"
command -v clang >/dev/null || { echo "fuzz: clang is needed (apt-get install clang)"; exit 1; }
set -e   # a target that does not build is a failure

clang $CF fuzz/fuzz_gguf.c src/gguf/gguf.c src/gguf/mapguard.c src/gguf/model.c src/gguf/inspect.c src/base/hash.c src/base/buf.c src/base/escape.c src/base/utf8.c src/text/unicode.c -lm -o $B/fuzz_gguf
cc -std=c11 -D_GNU_SOURCE -DDS4_FUZZ_SEEDGEN -Isrc fuzz/fuzz_gguf.c src/gguf/gguf.c src/gguf/mapguard.c src/gguf/model.c src/gguf/inspect.c src/base/hash.c src/base/buf.c src/base/escape.c src/base/utf8.c src/text/unicode.c -lm -o $B/fuzz_gguf_seeds
clang $CF fuzz/fuzz_tokenizer.c src/text/tokenizer.c src/text/unicode.c src/base/escape.c src/base/utf8.c src/gguf/gguf.c src/gguf/mapguard.c src/base/hash.c src/base/buf.c -lm -o $B/fuzz_tokenizer
clang $CF fuzz/fuzz_dsml.c src/text/dsml.c src/base/json_py.c src/base/escape.c src/base/utf8.c src/base/buf.c -ljansson -lm -o $B/fuzz_dsml
clang $CF fuzz/fuzz_glm_calls.c src/text/glm_calls.c src/base/json_py.c src/base/escape.c src/base/utf8.c src/base/buf.c -ljansson -lm -o $B/fuzz_glm_calls
clang $CF fuzz/fuzz_http1.c -o $B/fuzz_http1

mkdir -p $B/corpus-gguf $B/corpus-tok $B/corpus-dsml $B/corpus-glm $B/corpus-http1
$B/fuzz_gguf_seeds $B/corpus-gguf
# tokenizer seeds: the golden texts; DSML seeds: the canonical tool-call blocks
if [ -f "$S/golden/tokenizer/encode.jsonl" ] && [ -z "$(ls -A $B/corpus-tok)" ]; then
    /usr/bin/python3 - "$S/golden/tokenizer/encode.jsonl" $B/corpus-tok <<'PY'
import json, sys
for i, l in enumerate(open(sys.argv[1], encoding="utf-8")):
    t = json.loads(l)["text"].encode("utf-8", "surrogatepass")
    open("%s/seed%03d" % (sys.argv[2], i), "wb").write(t[:4096])
PY
fi
if [ -z "$(ls -A $B/corpus-dsml)" ]; then
    printf '\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n<｜DSML｜parameter name="a" string="true">x</｜DSML｜parameter>\n<｜DSML｜parameter name="b" string="false">{"k": [1, 2.5]}</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>' > $B/corpus-dsml/seed0
fi
if [ -z "$(ls -A $B/corpus-glm)" ]; then
    printf 'Sure.<tool_call>f<arg_key>s</arg_key><arg_value>x < y</arg_value><arg_key>n</arg_key><arg_value>3</arg_value><arg_key>u</arg_key><arg_value>{"k": [1, 2.5]}</arg_value></tool_call>\n<tool_call>g</tool_call>' > $B/corpus-glm/seed0
fi

# HTTP seeds: a head (mode byte 0) and a chunked body (mode byte 1)
if [ -z "$(ls -A $B/corpus-http1)" ]; then
    printf '\000POST /v1/messages?beta=true HTTP/1.1\r\nHost: localhost:8000\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n' > $B/corpus-http1/seed0
    printf '\0015;a=b\r\nhello\r\n0\r\nT: 1\r\n\r\nGET / HTTP/1.1\r\n' > $B/corpus-http1/seed1
fi

set +e   # from here each target reports its own status
export DS4_SHARED="$S"
status=0
for t in gguf:corpus-gguf:65536 tokenizer:corpus-tok:4096 dsml:corpus-dsml:4096 glm_calls:corpus-glm:4096 http1:corpus-http1:4096; do
    IFS=: read -r name corpus maxlen <<< "$t"
    echo "== fuzz_$name for ${secs}s"
    (cd $B && ./fuzz_$name -max_total_time="$secs" -max_len="$maxlen" -print_final_stats=1 \
        $corpus > fuzz_$name.log 2>&1)
    rc=$?
    grep -E "^(Done|stat::number|stat::new|==[0-9]+==ERROR|SUMMARY)" $B/fuzz_$name.log || true
    if [ $rc -ne 0 ]; then echo "fuzz_$name FAILED (exit $rc): see $B/fuzz_$name.log"; status=1; fi
done
exit $status
