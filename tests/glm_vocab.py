#!/usr/bin/env python3
"""glm_vocab.py -- a synthetic GLM-pre vocabulary and test texts for
tests/t_glm_tokenizer.sh (ds4's token ids against llama.cpp's).

Owns: nothing of the engine.  Standard library only.

    glm_vocab.py OUT.gguf CASES_DIR

Writes a vocab-only GGUF (general.architecture "llama" with the few
hyper-parameters llama.cpp reads before the vocabulary, so it loads it with
vocab_only; tokenizer.ggml.model "gpt2", tokenizer.ggml.pre "glm4"): the
256 byte tokens in the GPT-2 alphabet, merges learned greedily (most
frequent pair first) from all the test texts split at whitespace only --
so many merges cross the pieces GLM's regex cuts, and the pre-tokenizer
decides the ids -- and GLM's chat and tool-call tokens as control tokens
(tests/t_glm_front.sh writes its tiny glm-dsa model over this vocabulary).  Then one text
file per case in CASES_DIR: the corpus, hand-picked strings (contractions,
digit runs, CJK next to Latin, combining marks, whitespace runs, chat
tokens) and 300 random strings over an alphabet of those pieces.
"""
import random
import re
import struct
import sys

CORPUS = (
    "The quick brown fox jumps over the lazy dog. I'm sure you'll see; they're here, we've been, "
    "she'd go, it's done. DON'T SHOUT, YOU'LL SEE.\n"
    "Numbers: 1234567890, 3.14159, 2026-12-05, $100, 50%, 0x7f, 1e-5, \u0661\u0662\u0663\u0664\u0665.\n"
    "\u4e2d\u6587\u7684\u6587\u672c\u5904\u7406\u5f88\u91cd\u8981\u3002\u65e5\u672c\u8a9e\u306e\u30c6\u30ad"
    "\u30b9\u30c8\u3082\u5927\u4e8b\u3067\u3059\u3002\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\n"
    "\u00dcn\u00efc\u00f6d\u00e9 fa\u00e7ade na\u00efve caf\u00e9 \u2014 \u201cquotes\u201d \u2018single\u2019 "
    "\u2026 ellipsis \u2022 bullets \u2192 arrows \u2713 \U0001f600\U0001f389\n"
    "def main():\n    return foo(bar[1], {\"k\": [1, 2]})  # comment\n\tif x <= y && y != z: pass\n"
    "   multiple   spaces\ttabs\t\tand\nnewlines\n\n\nend\n"
    "\u00ababc\u00bb \u2014word \u201cquoted\u201d \u4e2d\u6587abc \u65e5\u672c\u8a9eabc e\u0301te\u0301 "
    "\u2460\u2461abc x\u200by\n") * 2

ADDED = ["[gMASK]", "<sop>", "<|endoftext|>", "<|user|>", "<|assistant|>", "<|system|>",
         "<|observation|>", "<think>", "</think>",
         # the tool-call tags (tests/t_glm_front.sh's tiny model chats with them)
         "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
         "<tool_response>", "</tool_response>"]


def gpt2_alphabet():
    bs = list(range(0x21, 0x7f)) + list(range(0xa1, 0xad)) + list(range(0xae, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def train(corpus, n_merges):
    words = {}
    for w in re.findall(r"\S+\s*|\s+", corpus):
        key = tuple(bytes([c]) for c in w.encode())
        words[key] = words.get(key, 0) + 1
    vocab = [bytes([b]) for b in range(256)]
    seen = set(vocab)
    merges = []
    for _ in range(n_merges):
        pairs = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], -len(kv[0][0] + kv[0][1]), kv[0]))[0]
        a, b = best
        merges.append(best)
        if a + b not in seen:
            seen.add(a + b)
            vocab.append(a + b)
        nw = {}
        for w, c in words.items():
            o, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    o.append(a + b)
                    i += 2
                else:
                    o.append(w[i])
                    i += 1
            nw[tuple(o)] = nw.get(tuple(o), 0) + c
        words = nw
    return vocab, merges


def gguf(path, vocab, merges):
    alpha = gpt2_alphabet()
    spell = lambda b: "".join(alpha[x] for x in b)
    toks = [spell(v) for v in vocab] + ADDED
    types = [1] * len(vocab) + [3] * len(ADDED)
    s = lambda x: struct.pack("<Q", len(x.encode())) + x.encode()
    kv = []
    kv.append(s("general.architecture") + struct.pack("<I", 8) + s("llama"))
    for k, v in [("context_length", 4096), ("embedding_length", 64), ("block_count", 1),
                 ("feed_forward_length", 128), ("attention.head_count", 4),
                 ("attention.head_count_kv", 4), ("vocab_size", len(toks))]:
        kv.append(s("llama." + k) + struct.pack("<II", 4, v))
    kv.append(s("llama.attention.layer_norm_rms_epsilon") + struct.pack("<If", 6, 1e-5))
    kv.append(s("tokenizer.ggml.model") + struct.pack("<I", 8) + s("gpt2"))
    kv.append(s("tokenizer.ggml.pre") + struct.pack("<I", 8) + s("glm4"))
    kv.append(s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, len(toks)) + b"".join(s(t) for t in toks))
    kv.append(s("tokenizer.ggml.token_type") + struct.pack("<IIQ", 9, 5, len(types)) +
              b"".join(struct.pack("<i", t) for t in types))
    ms = [spell(a) + " " + spell(b) for a, b in merges]
    kv.append(s("tokenizer.ggml.merges") + struct.pack("<IIQ", 9, 8, len(ms)) + b"".join(s(m) for m in ms))
    eos = len(vocab) + ADDED.index("<|endoftext|>")
    kv.append(s("tokenizer.ggml.eos_token_id") + struct.pack("<II", 4, eos))
    kv.append(s("tokenizer.ggml.padding_token_id") + struct.pack("<II", 4, eos))
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)) + b"".join(kv))


def cases():
    out = [CORPUS,
           "Hello world", "I'm here, you'LL see. They'RE 'Reilly's", "12345 6789x", "a1b22c333d4444",
           "  leading and   trailing  ", "line\n\nnext\r\n  \n\tx",
           "\u4e2d\u6587abc \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \ud55c\uad6d\uc5b4",
           "e\u0301te\u0301 cafe\u0301", "$x !!a ?? ...\n\n", "tab\tsep\t\t1", "\u3000\u5168\u89d2\u3000",
           "x\u00a0y", "foo()bar[]", "\u0663\u0664\u0665 \u2460\u2461\u2462\u2463", "don't", "'", "a'",
           "'ll'x", "\n", "   ", "\U0001f600 emoji\U0001f600x", "\u00ababc\u00bb \u2014word",
           "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>hi there<|assistant|><think>"]
    alphabet = list("abcXYZ 019'\n\t\r.,!?-_$%()[]{}\"") + [
        "\u4e2d", "\u6587", "\u00e9", "\u0301", "\u00a0", "\u3000", "\U0001f600", "\u0661", "\u2460",
        "\u00ab", "\u2014", "\u200b", "<|user|>", "<think>", "'s", "'LL", "'re"]
    r = random.Random(46)
    for _ in range(300):
        out.append("".join(r.choice(alphabet) for _ in range(r.randint(1, 40))))
    return out


def main():
    texts = cases()
    # Chat tokens are left out of the training text: a BPE token spelled
    # like one would be a duplicate (llama.cpp refuses the vocabulary).
    corpus = "".join(texts)
    for a in ADDED:
        corpus = corpus.replace(a, " ")
    vocab, merges = train(corpus, 1500)
    gguf(sys.argv[1], vocab, merges)
    for i, c in enumerate(texts):
        with open("%s/%03d.txt" % (sys.argv[2], i), "w", encoding="utf-8") as f:
            f.write(c)


if __name__ == "__main__":
    main()
