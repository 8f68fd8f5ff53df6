#!/usr/bin/env bash
# t_get.sh -- tests of ds4-get (tools/ds4_get.c, get_fetch.c, get_catalog.c),
# run from the repo root by tests/run.sh, against tests/get/serve.py: a local
# HTTP server (free port) serving a random file of a few MB with byte ranges,
# that drops connections, stalls, ignores Range, corrupts a byte, answers
# 404/503, sends a wrong Content-Range, and redirects like the Hugging Face
# hub (X-Linked-Etag / X-Linked-Size).  Checks: a whole download is checked
# and renamed; a dropped connection resumes in the same run; an interrupted
# run leaves only NAME.part and the next run resumes it (the server's log
# shows "Range: bytes=N-"); corruption is refused and nothing is left under
# the final name; a server ignoring Range restarts cleanly; retries, stalls,
# errors; the disk-space check (a 1 MiB tmpfs); the ./ds4flash.gguf link;
# --list states; SIGINT leaves a resumable .part; --verify; tokens.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
BD="${DS4_BIN_DIR:-.}"
case "$BD" in /*) ;; *) BD="$ROOT/$BD" ;; esac
GET="$BD/ds4-get"
PY=/usr/bin/python3
fail=0
ok()   { echo "ok   $*"; }
bad()  { echo "FAIL $*"; fail=1; }
skip() { echo "skip $*"; }

[ -x "$GET" ] || { echo "FAIL $GET not built (make; it needs libcurl4-openssl-dev: sh tools/deps.sh)"; exit 1; }
[ -x $PY ] || { echo "FAIL $PY not found (the test server)"; exit 1; }
# the server is local: no proxy in between
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY no_proxy NO_PROXY
unset DS4_GGUF_DIR DS4_GET_BASE_URL HF_TOKEN HF_HOME

T=$(mktemp -d "${TMPDIR:-/tmp}/t_get.XXXXXX")
SRV=""
MNT=""
cleanup() {
    [ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null
    [ -n "$MNT" ] && umount "$MNT" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT

# --- the server and its file --------------------------------------------
mkdir -p "$T/served" "$T/w"
F="$T/served/f.bin"
SIZE=3145851                     # 3 MiB + a bit: not a multiple of any buffer
head -c $SIZE /dev/urandom > "$F"
SHA=$(sha256sum "$F" | cut -d' ' -f1)
LOG="$T/server.log"
$PY tests/get/serve.py --root "$T/served" --log "$LOG" --port-file "$T/port" > "$T/server.out" 2>&1 &
SRV=$!
for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.1; done
[ -s "$T/port" ] || { echo "FAIL the test server did not start:"; cat "$T/server.out"; exit 1; }
PORT=$(cat "$T/port")
U="http://127.0.0.1:$PORT"
D="$T/w/d"
cd "$T/w"

# run NAME ARGS...: ds4-get, output in $T/out.txt / err.txt, exit status in RC
run() { "$GET" "$@" > "$T/out.txt" 2> "$T/err.txt"; RC=$?; }
logged() { grep -c -F -- "$1" "$LOG"; }        # requests whose log line has $1
same() { cmp -s "$F" "$1"; }
nothing_left() { [ ! -e "$D/$1" ] && [ ! -e "$D/$1.part" ]; }
show() { sed 's/^/    /' "$T/err.txt" "$T/out.txt" | tail -8; }

# --- usage ----------------------------------------------------------------
run --version
[ $RC = 0 ] && grep -q '^ds4-get ' "$T/out.txt" && ok "--version" || bad "--version: rc=$RC"
run --help
[ $RC = 0 ] && grep -q -- '--stall-timeout' "$T/out.txt" && grep -q DS4_GET_BASE_URL "$T/out.txt" &&
    ok "--help" || bad "--help: rc=$RC"
for args in "no-such-model" "x.bin --url $U/f/f.bin --sha256 abc" "../x --url $U/f/f.bin" \
            "x.bin --url ftp://h/f" "x.bin --url $U/f/f.bin --retries -1" "--list q2"; do
    # shellcheck disable=SC2086
    run $args
    if [ $RC = 2 ] && [ -s "$T/err.txt" ]; then ok "bad usage refused: $args"
    else bad "bad usage '$args': rc=$RC"; show; fi
done

# --- a whole download -----------------------------------------------------
: > "$LOG"
run a.bin --url "$U/f/f.bin" --dir "$D" --sha256 "$SHA" --size $SIZE
if [ $RC = 0 ] && same "$D/a.bin" && [ ! -e "$D/a.bin.part" ] &&
   grep -q "checked against --sha256" "$T/out.txt" &&
   [ "$(cat "$D/a.bin.sha256")" = "$SHA  a.bin" ] && (cd "$D" && sha256sum -c --quiet a.bin.sha256); then
    ok "whole download: checked, renamed, sha256sum-format record"
else bad "whole download: rc=$RC"; show; fi

run --url "$U/f/f.bin" --dir "$D"
if [ $RC = 0 ] && same "$D/f.bin" && grep -q "NOT checked: no published SHA-256" "$T/out.txt" &&
   grep -q "$SHA" "$D/f.bin.sha256"; then
    ok "no SHA-256 known: the computed one is printed and recorded, 'NOT checked' said"
else bad "download without a checksum: rc=$RC"; show; fi

# --- a dropped connection resumes in the same run ---------------------------
: > "$LOG"
run b.bin --url "$U/drop=1000000/f.bin" --dir "$D" --sha256 "$SHA"
if [ $RC = 0 ] && same "$D/b.bin" && [ "$(logged '"range": "bytes=1000000-"')" = 1 ]; then
    ok "dropped at 1000000: resumed with Range bytes=1000000- and checked"
else bad "drop and resume: rc=$RC"; show; cat "$LOG"; fi

# --- an interrupted run leaves NAME.part; the next resumes ------------------
: > "$LOG"
run c.bin --url "$U/cut=1000000/f.bin" --dir "$D" --sha256 "$SHA" --retries 0
if [ $RC = 1 ] && [ ! -e "$D/c.bin" ] && [ "$(stat -c %s "$D/c.bin.part" 2>/dev/null)" = 1000000 ] &&
   grep -q "run the same command again to resume" "$T/err.txt"; then
    ok "gave up: only c.bin.part (1000000 bytes) left, resume hint"
else bad "give up: rc=$RC"; show; fi
: > "$LOG"
run c.bin --url "$U/f/f.bin" --dir "$D" --sha256 "$SHA"
if [ $RC = 0 ] && same "$D/c.bin" && [ ! -e "$D/c.bin.part" ] &&
   [ "$(logged '"range": "bytes=1000000-"')" = 1 ] && [ "$(wc -l < "$LOG")" = 1 ]; then
    ok "second run: one request, Range bytes=1000000-, checked"
else bad "second run resume: rc=$RC"; show; cat "$LOG"; fi

# --- corruption is refused ----------------------------------------------------
run e.bin --url "$U/corrupt=123457/f.bin" --dir "$D" --sha256 "$SHA"
if [ $RC = 1 ] && grep -q "SHA-256 mismatch" "$T/err.txt" && nothing_left e.bin && [ ! -e "$D/e.bin.sha256" ]; then
    ok "a corrupted byte: refused, nothing under e.bin, no .part"
else bad "corruption: rc=$RC"; show; ls "$D"; fi
# the same with the hub's X-Linked-Etag as the only checksum
run e.bin --url "$U/hub/corrupt=5/f.bin" --dir "$D"
if [ $RC = 1 ] && grep -q "X-Linked-Etag" "$T/err.txt" && nothing_left e.bin; then
    ok "a corrupted byte against the hub's X-Linked-Etag: refused"
else bad "corruption (hub checksum): rc=$RC"; show; fi
run e2.bin --url "$U/hub/f.bin" --dir "$D"
if [ $RC = 0 ] && same "$D/e2.bin" && grep -q "checked against the hub's X-Linked-Etag" "$T/out.txt"; then
    ok "the hub's redirect followed, its X-Linked-Etag checked"
else bad "hub download: rc=$RC"; show; fi
# a catalogue or --sha256 value the hub contradicts: refused before any byte
run e3.bin --url "$U/hub/f.bin" --dir "$D" --sha256 "$(printf '%064d' 7)"
if [ $RC = 1 ] && grep -q "published file changed" "$T/err.txt" && nothing_left e3.bin; then
    ok "--sha256 contradicted by the hub: refused, nothing written"
else bad "hub/--sha256 mismatch: rc=$RC"; show; fi
run e4.bin --url "$U/f/f.bin" --dir "$D" --size 1000
if [ $RC = 1 ] && grep -q "were expected" "$T/err.txt" && nothing_left e4.bin; then
    ok "--size contradicted by the server: refused, nothing written"
else bad "size mismatch: rc=$RC"; show; fi

# --- a server that ignores Range: clean restart -------------------------------
run g.bin --url "$U/cut=700000/f.bin" --dir "$D" --retries 0
: > "$LOG"
run g.bin --url "$U/norange/f.bin" --dir "$D" --sha256 "$SHA"
if [ $RC = 0 ] && same "$D/g.bin" && grep -q "ignored the range" "$T/err.txt" &&
   [ "$(logged '"range": "bytes=700000-"')" = 1 ] && [ "$(logged '"status": 200')" = 1 ]; then
    ok "Range ignored (200): restarted from 0, file correct"
else bad "norange: rc=$RC"; show; cat "$LOG"; fi

# --- a wrong Content-Range start: refused, the .part kept as it was ---------
run h.bin --url "$U/cut=500000/f.bin" --dir "$D" --retries 0
run h.bin --url "$U/skew=3/f.bin" --dir "$D"
if [ $RC = 1 ] && grep -q "does not resume correctly" "$T/err.txt" && [ ! -e "$D/h.bin" ] &&
   [ "$(stat -c %s "$D/h.bin.part")" = 500000 ]; then
    ok "206 from the wrong offset: refused, h.bin.part unchanged"
else bad "skewed Content-Range: rc=$RC"; show; fi

# --- errors and retries --------------------------------------------------------
run i.bin --url "$U/status=404/f.bin" --dir "$D"
if [ $RC = 1 ] && grep -q "HTTP 404" "$T/err.txt" && nothing_left i.bin; then
    ok "404: clear error, nothing left"
else bad "404: rc=$RC"; show; fi
run i.bin --url "$U/status=403/f.bin" --dir "$D"
if [ $RC = 1 ] && grep -q "access denied" "$T/err.txt" && grep -q -- "--token" "$T/err.txt" && nothing_left i.bin; then
    ok "403: says a token may be needed"
else bad "403: rc=$RC"; show; fi
: > "$LOG"
run j.bin --url "$U/flaky=2/f.bin" --dir "$D" --sha256 "$SHA"
if [ $RC = 0 ] && same "$D/j.bin" && [ "$(logged '"status": 503')" = 2 ] && grep -q "retry 2 of 8" "$T/err.txt"; then
    ok "503 twice: retried with backoff, then downloaded"
else bad "flaky: rc=$RC"; show; fi
run j2.bin --url "$U/status=500/f.bin" --dir "$D" --retries 1
if [ $RC = 1 ] && grep -q "giving up after 2 attempts" "$T/err.txt" && nothing_left j2.bin; then
    ok "500 every time: gives up after --retries"
else bad "500: rc=$RC"; show; fi
: > "$LOG"
run k.bin --url "$U/stall=2000000/f.bin" --dir "$D" --sha256 "$SHA" --stall-timeout 1
if [ $RC = 0 ] && same "$D/k.bin" && grep -q "nothing received for 1 s" "$T/err.txt" &&
   [ "$(logged '"range": "bytes=2000000-"')" = 1 ]; then
    ok "a stalled connection: retried after --stall-timeout, resumed at 2000000"
else bad "stall: rc=$RC"; show; fi
run l.bin --url "http://127.0.0.1:1/f.bin" --dir "$D" --retries 0
if [ $RC = 1 ] && grep -q "giving up" "$T/err.txt" && nothing_left l.bin; then
    ok "connection refused: clear error, nothing left"
else bad "connection refused: rc=$RC"; show; fi

# --- the disk-space check --------------------------------------------------------
mkdir -p "$T/small"
if mount -t tmpfs -o size=1m tmpfs "$T/small" 2> /dev/null; then
    MNT="$T/small"
    run m.bin --url "$U/f/f.bin" --dir "$T/small"
    if [ $RC = 1 ] && grep -q "not enough disk space" "$T/err.txt" && [ -z "$(ls -A "$T/small")" ]; then
        ok "disk space: refused on a 1 MiB tmpfs before writing, nothing left"
    else bad "disk space: rc=$RC"; show; ls -la "$T/small"; fi
    run m.bin --url "$U/f/f.bin" --dir "$T/small" --size $SIZE
    if [ $RC = 1 ] && grep -q "not enough disk space" "$T/err.txt" && [ "$(logged m.bin)" = 0 ] &&
       [ -z "$(ls -A "$T/small")" ]; then
        ok "disk space with --size: refused before any request"
    else bad "disk space (--size): rc=$RC"; show; fi
    umount "$T/small" && MNT=""
else
    skip "disk space: cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)"
fi

# --- SIGINT leaves a resumable .part ----------------------------------------------
: > "$LOG"
"$GET" n.bin --url "$U/slow=400000/f.bin" --dir "$D" > "$T/out.txt" 2> "$T/err.txt" &
pid=$!
for _ in $(seq 100); do
    [ "$(stat -c %s "$D/n.bin.part" 2>/dev/null || echo 0)" -gt 100000 ] && break
    sleep 0.1
done
# a second ds4-get on the same file is refused while the first holds it
run n.bin --url "$U/f/f.bin" --dir "$D"
if [ $RC = 1 ] && grep -q "another ds4-get" "$T/err.txt"; then ok "a second ds4-get on the same .part: refused"
else bad "concurrent ds4-get: rc=$RC"; show; fi
kill -INT $pid
wait $pid
RC=$?
have=$(stat -c %s "$D/n.bin.part" 2>/dev/null || echo 0)
if [ $RC = 130 ] && [ "$have" -gt 0 ] && [ "$have" -lt $SIZE ] && [ ! -e "$D/n.bin" ] &&
   grep -q "interrupted; .*run the same command again to resume" "$T/err.txt"; then
    ok "SIGINT: exit 130, n.bin.part keeps $have bytes, resume hint"
else bad "SIGINT: rc=$RC, part=$have"; show; fi
: > "$LOG"
run n.bin --url "$U/f/f.bin" --dir "$D" --sha256 "$SHA"
if [ $RC = 0 ] && same "$D/n.bin" && [ "$(logged "\"range\": \"bytes=$have-\"")" = 1 ]; then
    ok "after SIGINT: resumed from byte $have, checked"
else bad "resume after SIGINT: rc=$RC"; show; cat "$LOG"; fi

# --- tokens --------------------------------------------------------------------------
: > "$LOG"
run o.bin --url "$U/f/f.bin" --dir "$D" --token s3cret
if [ $RC = 0 ] && [ "$(logged '"auth": "Bearer s3cret"')" = 1 ]; then ok "--token sent as a bearer token"
else bad "--token: rc=$RC"; show; cat "$LOG"; fi
: > "$LOG"
HF_TOKEN=leak run o2.bin --url "$U/f/f.bin" --dir "$D"
if [ $RC = 0 ] && [ "$(logged leak)" = 0 ]; then ok "HF_TOKEN is not sent to another host than huggingface.co"
else bad "HF_TOKEN sent to a mirror: rc=$RC"; cat "$LOG"; fi

# --- the catalogue, the ./ds4flash.gguf link, --list ---------------------------------
# Serve catalogue names from the local "hub" (the catalogue has no sizes or
# checksums yet, so any content passes; the hub's X-Linked-Etag is checked).
Q2=$("$GET" --list | awk '$1 == "q2-imatrix" || $2 == "q2-imatrix" {print}' | wc -l)
[ "$Q2" = 1 ] || bad "--list does not show q2-imatrix"
Q2F=DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf
Q4F=DeepSeek-V4-Flash-Q4KExperts-F16HC-F16Compressor-F16Indexer-Q8Attn-Q8Shared-Q8Out-chat-v2-imatrix.gguf
MTPF=DeepSeek-V4-Flash-MTP-Q4K-Q8_0-F32.gguf
cp "$F" "$T/served/$Q2F"
head -c 200000 /dev/urandom > "$T/served/$Q4F"
head -c 100000 /dev/urandom > "$T/served/$MTPF"
mkdir -p "$T/cat" && cd "$T/cat"
export DS4_GET_BASE_URL="$U/hub/"
: > "$LOG"
run q2-imatrix
if [ $RC = 0 ] && cmp -s "$F" "gguf/$Q2F" && [ "$(readlink ds4flash.gguf)" = "gguf/$Q2F" ] &&
   grep -q "checked against the hub's X-Linked-Etag" "$T/out.txt" && [ "$(logged "/hub/$Q2F")" = 1 ]; then
    ok "catalogue q2-imatrix: DS4_GET_BASE_URL, ./gguf/, ./ds4flash.gguf -> gguf/FILE"
else bad "catalogue download: rc=$RC"; show; ls -la; fi
run mtp
if [ $RC = 0 ] && [ -f "gguf/$MTPF" ] && [ "$(readlink ds4flash.gguf)" = "gguf/$Q2F" ] && grep -q -- "--mtp" "$T/out.txt"; then
    ok "mtp: downloaded, the link left on the model"
else bad "mtp: rc=$RC"; show; fi
run q4-imatrix --no-link --dir models
if [ $RC = 0 ] && [ -f "models/$Q4F" ] && [ "$(readlink ds4flash.gguf)" = "gguf/$Q2F" ]; then
    ok "--no-link --dir models: downloaded there, the link unchanged"
else bad "--no-link: rc=$RC"; show; fi
: > "$LOG"
run q2-imatrix
if [ $RC = 0 ] && grep -q "already downloaded" "$T/out.txt" && [ "$(wc -l < "$LOG")" = 0 ]; then
    ok "already downloaded: no request"
else bad "already downloaded: rc=$RC"; show; fi
# a partial download for --list
DS4_GET_BASE_URL="$U/hub/cut=150000/" run q4-imatrix --retries 0
"$GET" --list > "$T/list.txt" 2>&1
if grep -q '^\* q2-imatrix .*complete, SHA-256 on record' "$T/list.txt" &&
   grep -q '^  q4-imatrix .*partial: 150000 bytes' "$T/list.txt" &&
   grep -q '^  mtp .*complete' "$T/list.txt" && grep -q '^  q2-q4-imatrix .*absent' "$T/list.txt" &&
   grep -q "^./ds4flash.gguf -> gguf/$Q2F" "$T/list.txt"; then
    ok "--list: complete (marked *), partial with bytes, absent, the link"
else bad "--list:"; cat "$T/list.txt"; fi
run q4-imatrix
if [ $RC = 0 ] && [ "$(readlink ds4flash.gguf)" = "gguf/$Q4F" ] && cmp -s "$T/served/$Q4F" "gguf/$Q4F"; then
    ok "q4-imatrix resumed; the link moved to it"
else bad "q4 resume/link: rc=$RC"; show; fi
"$GET" --list > "$T/list.txt" 2>&1
grep -q '^\* q4-imatrix' "$T/list.txt" && grep -q '^  q2-imatrix' "$T/list.txt" &&
    ok "--list marks the new link target" || { bad "--list after relink:"; cat "$T/list.txt"; }
# --verify: a record that still matches, then a byte changed on disk
run --verify q2-imatrix
[ $RC = 0 ] && grep -q "matches gguf/$Q2F.sha256" "$T/out.txt" && ok "--verify: matches the record" ||
    { bad "--verify: rc=$RC"; show; }
printf '\x00' | dd of="gguf/$Q2F" bs=1 seek=99 conv=notrunc status=none
run --verify q2-imatrix
[ $RC = 1 ] && grep -q "DIFFERS" "$T/out.txt" && ok "--verify: a changed byte is found" ||
    { bad "--verify after damage: rc=$RC"; show; }
# a ds4flash.gguf that is the user's own file is never replaced
rm ds4flash.gguf && echo mine > ds4flash.gguf
run q2-imatrix
if [ $RC = 0 ] && [ "$(cat ds4flash.gguf)" = mine ] && grep -q "file of its own" "$T/err.txt"; then
    ok "a regular ./ds4flash.gguf is left as it is"
else bad "regular ds4flash.gguf: rc=$RC"; show; fi
unset DS4_GET_BASE_URL

exit $fail
