#!/usr/bin/env python3
"""glm_front.py URL -- the ds4-server half of tests/t_glm_front.sh: on a
glm-dsa model (--test-mode), a chat completion, a streamed one, a GLM tool
call forced through X-DS4-Test-Output coming back as an OpenAI tool_calls
entry and an Anthropic tool_use block, and the next request replaying that
call reusing the live session's prefix.  Standard library only; prints
ok/FAIL lines, exits 1 on any FAIL."""
import base64, json, sys, urllib.request

URL = sys.argv[1]
fails = 0


def check(cond, what):
    global fails
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        fails += 1


def post(path, body, out=None, raw=False):
    h = {"Content-Type": "application/json", "x-api-key": "x", "anthropic-version": "2023-06-01"}
    if out is not None:
        h["X-DS4-Test-Output"] = base64.b64encode(out.encode()).decode()
    rq = urllib.request.Request(URL + path, json.dumps(body).encode(), h)
    with urllib.request.urlopen(rq, timeout=60) as r:
        data = r.read().decode()
    return data if raw else json.loads(data)


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}]
CALL = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>" \
       "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"

# 1. a plain chat completion, sampled (noise) and forced
# (seeded: an unseeded draw from random weights may end at once)
r = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 8,
                                  "seed": 7})
check(r["choices"][0]["finish_reason"] in ("stop", "length") and r["usage"]["completion_tokens"] > 0,
      "chat completion generates (finish %s, %d tokens)" % (r["choices"][0]["finish_reason"], r["usage"]["completion_tokens"]))
r = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 50},
         "Thinking it over.</think>Hello there.")
m = r["choices"][0]["message"]
check(m.get("content") == "Hello there." and m.get("reasoning_content") == "Thinking it over." and
      r["choices"][0]["finish_reason"] == "stop",
      "forced answer split at </think>: %r / %r" % (m.get("reasoning_content"), m.get("content")))

# 2. streamed
s = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 50,
                                  "stream": True}, "Hmm.</think>Streamed answer.", raw=True)
content, fin = "", None
for line in s.splitlines():
    if line.startswith("data: ") and line != "data: [DONE]":
        c = json.loads(line[6:])["choices"]
        if c:
            content += c[0]["delta"].get("content") or ""
            fin = c[0].get("finish_reason") or fin
check(content == "Streamed answer." and fin == "stop" and s.rstrip().endswith("data: [DONE]"),
      "streamed completion: %r, finish %s" % (content, fin))

# 3. a GLM tool call -> OpenAI tool_calls
msgs = [{"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "Weather in Paris for 3 days?"}]
r = post("/v1/chat/completions", {"messages": msgs, "tools": TOOLS, "max_tokens": 100},
         "The user wants weather.</think>" + CALL)
ch = r["choices"][0]
tc = ch["message"].get("tool_calls") or []
check(ch["finish_reason"] == "tool_calls" and len(tc) == 1 and tc[0]["function"]["name"] == "get_weather" and
      json.loads(tc[0]["function"]["arguments"]) == {"city": "Paris", "days": 3},
      "GLM call -> OpenAI tool_calls: %s %s" % (ch["finish_reason"], json.dumps(tc)))
check(not ch["message"].get("content"), "no call text in the content: %r" % ch["message"].get("content"))
first_prompt = r["usage"]["prompt_tokens"]

# 4. the next request replays the call: the live session's prefix is reused
if tc:
    msgs2 = msgs + [ch["message"], {"role": "tool", "tool_call_id": tc[0]["id"], "content": "sunny, 21C"}]
    r2 = post("/v1/chat/completions", {"messages": msgs2, "tools": TOOLS, "max_tokens": 50}, "Done.</think>It is sunny.")
    cached = r2["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
    check(r2["choices"][0]["message"]["content"] == "It is sunny.", "answer after the tool result")
    check(cached >= first_prompt, "the replayed call hits the prefix: cached %d of %d (first prompt %d)" %
          (cached, r2["usage"]["prompt_tokens"], first_prompt))

# 5. streamed tool call
s = post("/v1/chat/completions", {"messages": msgs, "tools": TOOLS, "max_tokens": 100, "stream": True},
         "Ok.</think>" + CALL, raw=True)
name, args, fin = "", "", None
for line in s.splitlines():
    if line.startswith("data: ") and line != "data: [DONE]":
        c = json.loads(line[6:])["choices"]
        if c:
            for d in c[0]["delta"].get("tool_calls") or []:
                name += d.get("function", {}).get("name") or ""
                args += d.get("function", {}).get("arguments") or ""
            fin = c[0].get("finish_reason") or fin
check(name == "get_weather" and json.loads(args or "null") == {"city": "Paris", "days": 3} and fin == "tool_calls",
      "streamed GLM call: %s %s %s" % (name, args, fin))

# 6. Anthropic messages: tool_use
atools = [{"name": "get_weather", "description": "Weather of a city",
           "input_schema": TOOLS[0]["function"]["parameters"]}]
a = post("/v1/messages", {"model": "x", "max_tokens": 100, "tools": atools,
                          "messages": [{"role": "user", "content": "Weather in Paris?"}]},
         "Call it.</think>" + CALL)
tu = [b for b in a["content"] if b["type"] == "tool_use"]
check(a["stop_reason"] == "tool_use" and len(tu) == 1 and tu[0]["name"] == "get_weather" and
      tu[0]["input"] == {"city": "Paris", "days": 3},
      "GLM call -> Anthropic tool_use: %s %s" % (a["stop_reason"], json.dumps(tu)))

# 6b. Anthropic streamed: a tool_use block with its input as JSON deltas
s = post("/v1/messages", {"model": "x", "max_tokens": 100, "tools": atools, "stream": True,
                          "messages": [{"role": "user", "content": "Weather in Paris?"}]},
         "Call it.</think>" + CALL, raw=True)
blocks, pj, stop = [], "", None
for line in s.splitlines():
    if not line.startswith("data: "):
        continue
    ev = json.loads(line[6:])
    if ev["type"] == "content_block_start":
        blocks.append(ev["content_block"])
    elif ev["type"] == "content_block_delta" and ev["delta"]["type"] == "input_json_delta":
        pj += ev["delta"]["partial_json"]
    elif ev["type"] == "message_delta":
        stop = ev["delta"].get("stop_reason")
tub = [b for b in blocks if b["type"] == "tool_use"]
check(stop == "tool_use" and len(tub) == 1 and tub[0]["name"] == "get_weather" and
      json.loads(pj or "null") == {"city": "Paris", "days": 3},
      "streamed GLM call -> Anthropic tool_use: %s %s %s" % (stop, [b["type"] for b in blocks], pj))

# 7. Responses: a function_call item
rs = post("/v1/responses", {"model": "x", "input": "Weather in Paris?", "tools": [
    {"type": "function", "name": "get_weather", "parameters": TOOLS[0]["function"]["parameters"]}]},
    "Call it.</think>" + CALL)
fc = [o for o in rs.get("output", []) if o.get("type") == "function_call"]
check(len(fc) == 1 and fc[0]["name"] == "get_weather" and json.loads(fc[0]["arguments"]) == {"city": "Paris", "days": 3},
      "GLM call -> Responses function_call: %s" % json.dumps(fc))

# 8. tool_choice required forces <tool_call> (sampled name: noise, but a call or an error, never prose)
r = post("/v1/chat/completions", {"messages": msgs, "tools": TOOLS, "max_tokens": 100,
                                  "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
         None)
# (random weights: what follows the forced name is noise, so a malformed
# call -- finish "error", its text returned as content, docs/server.md --
# is as valid an outcome as a call)
check(r["choices"][0]["finish_reason"] in ("tool_calls", "length", "stop", "error"),
      "named tool_choice runs (finish %s)" % r["choices"][0]["finish_reason"])

sys.exit(1 if fails else 0)
