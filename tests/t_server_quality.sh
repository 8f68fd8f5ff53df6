#!/usr/bin/env bash
# ds4-server quality features on a tiny model (Python standard library
# client): OpenAI logprobs on /v1/chat/completions (stream and not) and
# /v1/completions equal ds4 --dump-logprobs for the same prompt (one
# logprob code), --trace writes one JSON line per request with the
# rendered prompt, cache decision, text, tool-parser events and timings,
# and the --steer flags (scale 0 = the unsteered numbers; bad combinations
# refused).
set -u
cd "$(dirname "$0")/.."
S="${DS4_SHARED:-../shared}"
M="$S/golden/models/tiny-a-f16.gguf"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
/usr/bin/python3 - "$M" "$T" <<'PYEOF'
import json, os, re, subprocess, sys, time, urllib.request, urllib.error
BD = os.environ.get("DS4_BIN_DIR", ".")   # build/debug/bin in the sanitizer pass
M, T = sys.argv[1], sys.argv[2]
fail = 0
def ok(m): print("ok   " + m)
def bad(m):
    global fail
    fail += 1
    print("FAIL " + m)

def start(*extra):
    log = open(T + "/server.log", "w")
    p = subprocess.Popen([os.path.join(BD, "ds4-server"), "-m", M, "--port", "0", "--ctx", "2048", "-t", "1", *extra],
                         stderr=log, stdout=subprocess.DEVNULL)
    for _ in range(300):
        s = open(T + "/server.log").read()
        m = re.search(r"listening on (http://\S+)", s)
        if m:
            return p, m.group(1)
        if p.poll() is not None:
            break
        time.sleep(0.1)
    p.kill()
    raise SystemExit("server did not start:\n" + open(T + "/server.log").read())

def stop(p):
    p.terminate()  # SIGTERM: a clean shutdown
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
    # a sanitizer build (make DEBUG=1) reports leaks and errors at exit
    s = open(T + "/server.log").read()
    if "Sanitizer" in s:
        bad("sanitizer report from ds4-server:\n" + s[s.index("Sanitizer") - 200:][:3000])

def post(url, path, body, stream=False):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            data = r.read().decode()
            status = r.status
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode() or "null")
    if not stream:
        return status, json.loads(data)
    chunks = [json.loads(l[6:]) for l in data.split("\n") if l.startswith("data: ") and l != "data: [DONE]"]
    return status, chunks

def dump_logprobs(prompt_text, n, k):
    ids = json.loads(subprocess.run([os.path.join(BD, "ds4"), "-m", M, "--tokenize", "--special", "--prompt-file", "/dev/stdin"],
                                    input=prompt_text.encode(), capture_output=True, check=True).stdout)
    subprocess.run([os.path.join(BD, "ds4"), "-q", "-m", M, "--tokens", ",".join(map(str, ids)), "-n", str(n), "--temp", "0",
                    "--dump-logprobs", T + "/lp.json", "--logprobs-top-k", str(k)], check=True, capture_output=True)
    return json.load(open(T + "/lp.json"))["steps"]

def same_as_cli(entries, steps, label):
    if len(entries) != len(steps):
        return bad("%s: %d entries, ds4 gave %d steps" % (label, len(entries), len(steps)))
    worst = 0.0
    for e, s in zip(entries, steps):
        if bytes(e["bytes"]) != bytes(s["bytes"]):
            return bad("%s: token %r vs ds4 %r" % (label, bytes(e["bytes"]), bytes(s["bytes"])))
        worst = max(worst, abs(e["logprob"] - s["logprob"]))
        if [bytes(a["bytes"]) for a in e["top_logprobs"]] != [bytes(a["bytes"]) for a in s["top"]]:
            return bad("%s: top alternatives differ from ds4" % label)
        for a, b in zip(e["top_logprobs"], s["top"]):
            worst = max(worst, abs(a["logprob"] - b["logprob"]))
    if worst <= 1e-6:
        ok("%s: %d tokens, equal to ds4 --dump-logprobs (max diff %.1e)" % (label, len(entries), worst))
    else:
        bad("%s: logprobs differ from ds4 by %g" % (label, worst))

p, url = start("--trace", T + "/trace.jsonl")
try:
    msgs = [{"role": "user", "content": "Name three colors."}]
    st, r = post(url, "/v1/chat/completions", {"model": "deepseek-chat", "messages": msgs, "max_tokens": 5,
                                              "temperature": 0, "logprobs": True, "top_logprobs": 4})
    lp = r["choices"][0]["logprobs"]["content"] if st == 200 else None
    trace = [json.loads(l) for l in open(T + "/trace.jsonl")]
    if st != 200 or not trace:
        bad("chat with logprobs: %s %s" % (st, r))
    else:
        prompt = trace[-1]["prompt"]
        steps = dump_logprobs(prompt, 5, 4)
        same_as_cli(lp, steps, "chat logprobs")
        text = b"".join(bytes(e["bytes"]) for e in lp).decode("utf-8", "replace")
        if all(len(e["top_logprobs"]) == 4 for e in lp) and r["usage"]["completion_tokens"] == len(lp):
            ok("chat logprobs: one entry per completion token, top_logprobs 4")
        else:
            bad("chat logprobs shape")
        st, chunks = post(url, "/v1/chat/completions", {"model": "deepseek-chat", "messages": msgs, "max_tokens": 5,
                                                        "temperature": 0, "logprobs": True, "top_logprobs": 4,
                                                        "stream": True}, stream=True)
        sl = [e for c in chunks for ch in c.get("choices", []) if ch.get("logprobs") for e in ch["logprobs"]["content"]]
        if st == 200 and sl == lp:
            ok("chat stream: the chunks' logprobs add up to the non-stream ones")
        else:
            bad("chat stream logprobs: %d entries vs %d" % (len(sl), len(lp)))
        st, r2 = post(url, "/v1/chat/completions", {"model": "deepseek-chat", "messages": msgs, "max_tokens": 2, "temperature": 0})
        if st == 200 and r2["choices"][0]["logprobs"] is None:
            ok("chat without logprobs: logprobs null")
        else:
            bad("chat without logprobs: %s" % r2)

    st, r = post(url, "/v1/completions", {"model": "x", "prompt": "The sky is", "max_tokens": 4, "temperature": 0, "logprobs": 3})
    if st != 200:
        bad("completions with logprobs: %s %s" % (st, r))
    else:
        lpc = r["choices"][0]["logprobs"]
        prompt = json.loads(open(T + "/trace.jsonl").read().strip().split("\n")[-1])["prompt"]
        steps = dump_logprobs(prompt, 4, 3)
        conv = [{"bytes": list(s["bytes"]), "logprob": s["logprob"]} for s in steps]
        good = (len(lpc["tokens"]) == len(steps) == 4 and
                all(abs(a - s["logprob"]) <= 1e-6 for a, s in zip(lpc["token_logprobs"], steps)) and
                all(len(d) <= 3 for d in lpc["top_logprobs"]) and
                lpc["text_offset"] == sorted(lpc["text_offset"]) and lpc["text_offset"][0] == 0)
        ok("completions logprobs (legacy shape) equal ds4 --dump-logprobs") if good else bad("completions logprobs: %s" % lpc)

    st, r = post(url, "/v1/responses", {"model": "x", "input": "hi", "logprobs": True})
    ok("logprobs on /v1/responses refused (400)") if st == 400 else bad("responses logprobs: %s" % st)
    st, r = post(url, "/v1/chat/completions", {"model": "x", "messages": msgs, "top_logprobs": 3})
    ok("top_logprobs without logprobs refused") if st == 400 else bad("top_logprobs alone: %s" % st)
    st, r = post(url, "/v1/chat/completions", {"model": "x", "messages": msgs, "logprobs": True, "top_logprobs": 21})
    ok("top_logprobs above 20 refused") if st == 400 else bad("top_logprobs 21: %s" % st)

    # a tool call, for the parser events in the trace
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
              "properties": {"city": {"type": "string"}}}}}]
    post(url, "/v1/chat/completions", {"model": "deepseek-chat", "messages": msgs, "max_tokens": 3, "tools": tools})
finally:
    stop(p)

trace = [json.loads(l) for l in open(T + "/trace.jsonl")]
need = {"time", "job", "api", "prompt", "prompt_tokens", "cache", "reasoning", "content", "tool_calls",
        "tool_parser_events", "finish", "prefill_s", "decode_s", "completion_tokens"}
if len(trace) == 5 and all(need <= set(t) for t in trace):
    ok("--trace: one JSON line per generating request (%d), every field" % len(trace))
else:
    bad("--trace: %d lines, fields %s" % (len(trace), sorted(set(trace[0])) if trace else None))
if trace and trace[0]["prompt"].startswith("<｜begin▁of▁sentence｜>") and trace[0]["cache"]["source"] == "none" \
   and all(t["cache"]["reused_tokens"] + t["cache"]["evaluated_tokens"] == t["prompt_tokens"] for t in trace) \
   and trace[3]["prompt"].endswith("The sky is") and trace[3]["api"] != trace[0]["api"]:
    ok("--trace: rendered prompts and cache decisions (reused + evaluated = prompt tokens)")
else:
    bad("--trace cache: %s" % [(t["api"], t["prompt"][:30], t["prompt_tokens"], t["cache"]) for t in trace])

# test mode: a scripted DSML answer, so the trace shows parser events
p, url = start("--trace", T + "/trace2.jsonl", "--test-mode")
try:
    import base64
    dsml = "\n\n<\uff5cDSML\uff5ctool_calls>\n<\uff5cDSML\uff5cinvoke name=\"get_weather\">\n" \
           "<\uff5cDSML\uff5cparameter name=\"city\" string=\"true\">Rome</\uff5cDSML\uff5cparameter>\n" \
           "</\uff5cDSML\uff5cinvoke>\n</\uff5cDSML\uff5ctool_calls>"
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps({"model": "deepseek-chat", "messages": msgs,
                                 "tools": tools}).encode(), {"Content-Type": "application/json",
                                 "X-DS4-Test-Output": base64.b64encode(dsml.encode()).decode()})
    urllib.request.urlopen(req, timeout=600).read()
finally:
    stop(p)
t = json.loads(open(T + "/trace2.jsonl").read().strip())
ev = [e["event"] for e in t["tool_parser_events"]]
if ev[:1] == ["call_begin"] and "call_end" in ev and ev[-1] == "done" and t["tool_calls"][0]["name"] == "get_weather" \
   and t["finish"] == "tool_calls":
    ok("--trace: tool-parser events %s" % ev)
else:
    bad("--trace tool events: %s" % t)

# steering flags: scale 0 gives the unsteered numbers; bad combinations refused
subprocess.run([os.path.join(BD, "ds4-steer"), "build", "-m", M, "--positive", "/dev/stdin", "--negative", T + "/neg.txt",
                "--layer", "1", "-o", T + "/dir"], input=b"good happy\n", capture_output=True) if open(T + "/neg.txt", "w").write("bad sad\n") else None
p, url = start("--steer", T + "/dir/direction.f32", "--steer-scale", "0")
try:
    st, r = post(url, "/v1/chat/completions", {"model": "deepseek-chat", "messages": [{"role": "user", "content": "Name three colors."}],
                                              "max_tokens": 5, "temperature": 0, "logprobs": True, "top_logprobs": 4})
    ok("--steer --steer-scale 0: the unsteered logprobs") if st == 200 and r["choices"][0]["logprobs"]["content"] == lp else bad("steer scale 0 differs")
finally:
    stop(p)
p, url = start("--steer", T + "/dir/direction.f32", "--steer-scale", "300", "--steer-layers", "0:5")
try:
    st, r = post(url, "/v1/chat/completions", {"model": "deepseek-chat", "messages": [{"role": "user", "content": "Name three colors."}],
                                              "max_tokens": 5, "temperature": 0, "logprobs": True, "top_logprobs": 4})
    ok("--steer-scale 300: different numbers") if st == 200 and r["choices"][0]["logprobs"]["content"] != lp else bad("steering had no effect in the server")
finally:
    stop(p)
for args, frag in ((["--steer", T + "/dir/direction.f32"], "--steer needs --steer-scale"),
                   (["--steer-scale", "1"], "need --steer FILE"),
                   (["--steer", T + "/dir/direction.f32", "--steer-scale", "1", "--kv-disk-dir", T + "/kv"], "cannot be combined"),
                   (["--steer", T + "/dir/direction.f32", "--steer-scale", "1", "--steer-layers", "2:9"], "--steer-layers: bad layers")):
    r = subprocess.run([os.path.join(BD, "ds4-server"), "-m", M, "--port", "0", *args], capture_output=True, timeout=60)
    ok("ds4-server refuses %s" % " ".join(a.replace(T, "") for a in args)) if r.returncode != 0 and frag in r.stderr.decode() \
        else bad("ds4-server %s: rc %d %s" % (args, r.returncode, r.stderr.decode()[-200:]))
print("t_server_quality: %d failure(s)" % fail)
sys.exit(1 if fail else 0)
PYEOF
