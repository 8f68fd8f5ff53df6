#!/usr/bin/env python3
"""stream_client.py -- one streaming /v1/completions request, timed from the
client (bench/llamacpp.sh, the servers side by side).

  stream_client.py URL PROMPT_FILE MAX_TOKENS [PROMPT_TOKENS]

Sends the first PROMPT_TOKENS (default 500) words' worth of PROMPT_FILE as
a raw prompt (no chat template: both servers' /v1/completions use the text
as it is), greedy, `max_tokens` MAX_TOKENS, `stream: true` with usage, and
prints one line:

  ttft_s T decode_tps D prompt_tokens P completion_tokens C

ttft_s: from sending the request to the first streamed text; decode_tps:
(C - 1) / (time of the last text - time of the first text), C the
completion tokens the server reports in its usage (else the text events
counted).  Python's standard library only.
"""
import json
import sys
import time
import urllib.request


def main():
    url, path, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
    want = int(sys.argv[4]) if len(sys.argv) > 4 else 500
    words = open(path, encoding="utf-8").read().split()
    # ~1.65 tokens a word in this Italian text with DeepSeek's vocabulary (measured: 646 tokens for 500 words)
    prompt = " ".join(words[: max(1, int(want / 1.65))])
    body = json.dumps({
        "model": "bench", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
        "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True,
    }).encode()
    req = urllib.request.Request(url.rstrip("/") + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    first = last = None
    events = 0
    usage = None
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            ev = json.loads(data)
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices") or []:
                if ch.get("text"):
                    now = time.monotonic()
                    first = first if first is not None else now
                    last = now
                    events += 1
    if first is None:
        print("stream_client: no text streamed", file=sys.stderr)
        return 1
    c = (usage or {}).get("completion_tokens") or events
    p = (usage or {}).get("prompt_tokens") or 0
    dt = last - first
    print(f"ttft_s {first - t0:.3f} decode_tps {((c - 1) / dt) if dt > 0 and c > 1 else 0:.2f} "
          f"prompt_tokens {p} completion_tokens {c}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
