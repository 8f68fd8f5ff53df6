#!/usr/bin/env python3
"""Compare a local `ds4 --dump-logprobs` run with an official API vector.

usage:
  check_logprobs.py OFFICIAL.json LOCAL.json --prompt-tokens N
                    [--mad-max X] [--json]

  OFFICIAL.json  schema ds4-official-logprobs-v1 (shared/golden/official-logprobs)
  LOCAL.json     ds4 --dump-logprobs output of the same prompt, greedy,
                 non-thinking, --logprobs-top-k >= the official top count
  N              the local rendered prompt's token count (ds4 --dump-tokens)

Checks (exit 1 on failure):
  - N equals the API's usage.prompt_tokens (same template, same tokenizer);
  - the greedy tokens are the same, compared by their bytes, at every step;
  - the mean absolute difference between the official logprobs and the local
    logprobs of the same tokens is <= --mad-max (default 0.7 nats), over the
    official entries that carry a real value.  The API answers a temperature-0
    request with the temperature-0 distribution: the chosen token at 0.0 and
    every alternative clamped to -9999 -- those clamped entries carry no value
    and are left out (a local logprob cannot be compared with a clamp).
    What remains is "logprob of the chosen token is near 0": 0.7 nats means
    the local model still gives the official token p >= 0.5, which a correct
    engine on a 2-bit expert quantization clears on these near-certain
    continuations, while a wrong template or a broken kernel does not.
Reported per step, not enforced: the top-5 overlap by bytes (the clamped
alternatives tie at -9999, so the API's order among them is not a ranking).
Python standard library only.
"""
import argparse
import json
import sys

CLAMP = -9000.0   # official values at or below this are the API's -9999 floor


def load(path):
    try:
        with open(path, "rb") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("check_logprobs: cannot read %s: %s" % (path, e))


def compare(off, loc, prompt_tokens, mad_max):
    fails = []
    rep = {"id": off.get("id"), "prompt_tokens": prompt_tokens,
           "official_prompt_tokens": off["usage"]["prompt_tokens"], "steps": []}
    if prompt_tokens != off["usage"]["prompt_tokens"]:
        fails.append("prompt tokens: local %d, official %d" % (prompt_tokens, off["usage"]["prompt_tokens"]))
    osteps, lsteps = off["steps"], loc["steps"]
    if len(lsteps) < len(osteps):
        fails.append("local run has %d steps, official %d" % (len(lsteps), len(osteps)))
    diffs = []
    for i, os_ in enumerate(osteps):
        if i >= len(lsteps):
            break
        ls = lsteps[i]
        local_by_bytes = {}
        for t in ls["top"]:
            local_by_bytes.setdefault(bytes(t["bytes"]), t["logprob"])
        if "bytes" in ls:
            local_by_bytes.setdefault(bytes(ls["bytes"]), ls["logprob"])
        same = bytes(os_["token"]["bytes"]) == bytes(ls.get("bytes", []))
        if not same:
            fails.append("step %d: greedy token %r, official %r"
                         % (i, bytes(ls.get("bytes", [])), bytes(os_["token"]["bytes"])))
        step_d = []
        missing = 0
        for t in os_["top_logprobs"]:
            if t["logprob"] <= CLAMP:
                continue
            b = bytes(t["token"]["bytes"])
            if b not in local_by_bytes:
                missing += 1
                continue
            step_d.append(abs(local_by_bytes[b] - t["logprob"]))
        if missing:
            fails.append("step %d: %d official token(s) with a real logprob are not in the local top-%d"
                         % (i, missing, len(ls["top"])))
        o5 = [bytes(t["token"]["bytes"]) for t in os_["top_logprobs"][:5]]
        l5 = [bytes(t["bytes"]) for t in ls["top"][:5]]
        diffs += step_d
        rep["steps"].append({
            "step": i, "same_token": same,
            "local_logprob": ls.get("logprob"), "official_logprob": os_["logprob"],
            "mad": sum(step_d) / len(step_d) if step_d else None,
            "top5_overlap": len(set(o5) & set(l5)),
        })
    rep["mad"] = sum(diffs) / len(diffs) if diffs else None
    if rep["mad"] is not None and rep["mad"] > mad_max:
        fails.append("mean absolute logprob difference %.4f > %.4f" % (rep["mad"], mad_max))
    rep["fails"] = fails
    return rep


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("official")
    ap.add_argument("local")
    ap.add_argument("--prompt-tokens", type=int, required=True)
    ap.add_argument("--mad-max", type=float, default=0.7)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    off, loc = load(a.official), load(a.local)
    try:
        rep = compare(off, loc, a.prompt_tokens, a.mad_max)
    except (KeyError, TypeError) as e:
        sys.exit("check_logprobs: malformed input: missing or bad field %s" % e)
    if a.json:
        print(json.dumps(rep, indent=1))
    else:
        print("%s: prompt tokens %d (official %d)" % (rep["id"], rep["prompt_tokens"], rep["official_prompt_tokens"]))
        for s in rep["steps"]:
            print("  step %d  token %s  local logprob %s  official %s  mad %s  top-5 overlap %d/5" % (
                s["step"], "same" if s["same_token"] else "DIFFERENT",
                "%.4f" % s["local_logprob"] if s["local_logprob"] is not None else "-",
                "%.4f" % s["official_logprob"], "%.4f" % s["mad"] if s["mad"] is not None else "-",
                s["top5_overlap"]))
        print("  mean absolute difference: %s" % ("%.4f" % rep["mad"] if rep["mad"] is not None else "n/a"))
    if rep["fails"]:
        print("FAIL: " + "; ".join(rep["fails"]))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
