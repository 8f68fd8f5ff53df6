# tests/lib/server.sh -- start and stop a ds4-server for a script test
# (sourced).  One server at a time per script: its pid in SPID, its base
# URL in URL.
#
#   server_start LOG CMD...  run CMD (a ds4-server command line, --port 0)
#                            in the background, stderr to LOG; returns 0
#                            once it prints "listening on URL" and /health
#                            answers, 1 (URL empty) when it exits first or
#                            30 s pass
#   server_stop              SIGTERM, up to 10 s for a clean exit, then
#                            SIGKILL; returns the server's exit status (124
#                            when it had to be killed), 0 when none ran
#
# A script's EXIT trap calls server_stop, so a failing script never leaves
# a server behind.
SPID=""
URL=""

server_start() {
    local log="$1"
    shift
    "$@" 2> "$log" &
    SPID=$!
    URL=""
    for _ in $(seq 300); do
        URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$log" | head -n1)
        [ -n "$URL" ] && break
        kill -0 "$SPID" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$URL" ] || return 1
    for _ in $(seq 100); do curl -sf "$URL/health" > /dev/null 2>&1 && break; sleep 0.1; done
    return 0
}

server_stop() {
    [ -n "$SPID" ] || return 0
    local st=124
    kill -TERM "$SPID" 2>/dev/null
    for _ in $(seq 100); do
        if ! kill -0 "$SPID" 2>/dev/null; then wait "$SPID"; st=$?; break; fi
        sleep 0.1
    done
    if [ $st = 124 ]; then kill -9 "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null; fi
    SPID=""
    return $st
}
