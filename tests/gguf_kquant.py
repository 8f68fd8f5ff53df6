#!/usr/bin/env python3
"""gguf_kquant.py [--dequantized] LIBGGML_BASE IN OUT RULE... -- copy a GGUF, re-storing its F32
matrices in llama.cpp's K-quants with ggml's own reference quantizers
(quantize_row_<type>_ref of llama.cpp's prebuilt libggml-base.so, through
ctypes), the bytes a user's llama-quantize file holds.  tests/t_kquant.sh
uses it to make the tiny models of its end-to-end checks.

RULE is GLOB=TYPE (fnmatch over tensor names, first match wins; TYPE one of
q3_k q4_k q5_k q6_k iq4_xs f32).  A tensor is quantized only when it is
F32, has two or more dimensions, its rows are whole 256-blocks and a rule
gives it a K-quant; everything else is copied as is.  Metadata and the
tensor order are kept; offsets are recomputed (alignment kept).  Prints one
line per quantized tensor to stderr.
--dequantized: store ggml's dequantization of those bytes (dequantize_row_<type>)
as F32 instead: the same model values in a float file, for the checks that
ds4 reads the quantized bytes exactly as ggml does.
"""
import ctypes
import fnmatch
import struct
import sys

import numpy as np

TYPES = {"q3_k": (11, 110), "q4_k": (12, 144), "q5_k": (13, 176), "q6_k": (14, 210), "iq4_xs": (23, 136)}
BLOCK = {0: (1, 4), 1: (1, 2), 8: (32, 34), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
         14: (256, 210), 16: (256, 66), 23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8),
         28: (1, 8), 30: (1, 2), 39: (32, 17)}
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def skip_value(b, o, t):
    if t in SCALAR:
        return o + SCALAR[t]
    if t == 8:
        n = struct.unpack_from("<Q", b, o)[0]
        return o + 8 + n
    if t == 9:
        et, n = struct.unpack_from("<IQ", b, o)
        o += 12
        for _ in range(n):
            o = skip_value(b, o, et)
        return o
    raise ValueError("bad metadata type %d" % t)


def main():
    args = sys.argv[1:]
    deq = bool(args) and args[0] == "--dequantized"
    if deq:
        args = args[1:]
    if len(args) < 3:
        sys.exit(__doc__)
    lib = ctypes.CDLL(args[0])
    src, dst, rules = args[1], args[2], [r.split("=", 1) for r in args[3:]]
    b = open(src, "rb").read()
    magic, ver, nt, nkv = struct.unpack_from("<4sIQQ", b, 0)
    if magic != b"GGUF":
        sys.exit("gguf_kquant: not a GGUF file")
    o = 24
    align = 32
    for _ in range(nkv):
        n = struct.unpack_from("<Q", b, o)[0]
        key = b[o + 8:o + 8 + n].decode()
        o += 8 + n
        t = struct.unpack_from("<I", b, o)[0]
        o += 4
        if key == "general.alignment":
            align = struct.unpack_from("<I", b, o)[0]
        o = skip_value(b, o, t)
    kv_end = o
    tensors = []
    for _ in range(nt):
        n = struct.unpack_from("<Q", b, o)[0]
        name = b[o + 8:o + 8 + n].decode()
        o += 8 + n
        nd = struct.unpack_from("<I", b, o)[0]
        ne = list(struct.unpack_from("<%dQ" % nd, b, o + 4))
        o += 4 + 8 * nd
        t, off = struct.unpack_from("<IQ", b, o)
        o += 12
        tensors.append([name, ne, t, off])
    data0 = (o + align - 1) // align * align
    out_data = []
    for tz in tensors:
        name, ne, t, off = tz
        nel = int(np.prod(ne))
        blk, bb = BLOCK[t]
        size = nel // blk * bb
        raw = b[data0 + off:data0 + off + size]
        want = next((ty for pat, ty in rules if fnmatch.fnmatch(name, pat)), "f32")
        if t == 0 and len(ne) >= 2 and ne[0] % 256 == 0 and want in TYPES:
            gt, gb = TYPES[want]
            x = np.frombuffer(raw, dtype=np.float32).copy()
            q = ctypes.create_string_buffer(nel // 256 * gb)
            fn = getattr(lib, "quantize_row_%s_ref" % want.replace("_k", "_K"))
            fn.restype = None
            fn(x.ctypes.data_as(ctypes.c_void_p), q, ctypes.c_int64(nel))
            raw = q.raw
            tz[2] = gt
            if deq:
                y = np.empty(nel, dtype=np.float32)
                fd = getattr(lib, "dequantize_row_%s" % want.replace("_k", "_K"))
                fd.restype = None
                fd(q, y.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(nel))
                raw = y.tobytes()
                tz[2] = 0
            print("gguf_kquant: %s %s -> %s" % (name, "x".join(map(str, ne)), want.upper()), file=sys.stderr)
        out_data.append(raw)
    head = bytearray(b[:kv_end])
    off = 0
    for tz, raw in zip(tensors, out_data):
        name, ne, t, _ = tz
        nb = name.encode()
        head += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        head += struct.pack("<IQ", t, off)
        tz[3] = off
        off = (off + len(raw) + align - 1) // align * align
    with open(dst, "wb") as f:
        f.write(head)
        f.write(b"\0" * ((-len(head)) % align))
        for raw in out_data:
            f.write(raw)
            f.write(b"\0" * ((-len(raw)) % align))


if __name__ == "__main__":
    main()
