#!/usr/bin/env python3
"""gguf_set.py IN OUT KEY VALUE [INDEX] -- copy a GGUF, changing one integer
metadata value (tests/t_limits.sh uses it to make files just beyond the
engine's limits, which ds4-synth refuses to write).

KEY is the full key (deepseek4.rope.dimension_count); with INDEX, element
INDEX of an integer array.  The value keeps its type when it fits and is
widened to u64/i64 otherwise; the header is rewritten and the tensor data
copied unchanged behind the re-aligned header (tensor offsets are relative
to the data section, so they stay valid).
"""
import struct
import sys

FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}
INT = {0, 1, 2, 3, 4, 5, 10, 11}


class Reader:
    def __init__(self, b):
        self.b, self.o = b, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.o)[0]
        self.o += struct.calcsize(fmt)
        return v

    def raw(self, n):
        v = self.b[self.o:self.o + n]
        self.o += n
        return v

    def string(self):
        return self.raw(self.take("<Q"))


def fits(t, v):
    lo, hi = {0: (0, 255), 1: (-128, 127), 2: (0, 65535), 3: (-32768, 32767),
              4: (0, 2**32 - 1), 5: (-2**31, 2**31 - 1), 10: (0, 2**64 - 1), 11: (-2**63, 2**63 - 1)}[t]
    return lo <= v <= hi


def wide(v):
    return 10 if v >= 0 else 11


def value(r, t):
    """Returns the raw bytes of one value of type t."""
    start = r.o
    if t == 8:
        r.string()
    elif t == 9:
        et, n = r.take("<I"), r.take("<Q")
        for _ in range(n):
            value(r, et)
    else:
        r.take(FMT[t])
    return r.b[start:r.o]


def main():
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    src, dst, key, val = sys.argv[1], sys.argv[2], sys.argv[3].encode(), int(sys.argv[4])
    index = int(sys.argv[5]) if len(sys.argv) == 6 else None
    b = open(src, "rb").read()
    r = Reader(b)
    magic, version, n_t, n_kv = r.take("<I"), r.take("<I"), r.take("<Q"), r.take("<Q")
    if magic != 0x46554747 or version != 3:
        sys.exit("gguf_set: not a GGUF v3 file")
    out = [struct.pack("<IIQQ", magic, version, n_t, n_kv)]
    found = False
    align = 32
    for _ in range(n_kv):
        k = r.string()
        t = r.take("<I")
        body_start = r.o
        raw = value(r, t)
        if k == b"general.alignment":
            align = struct.unpack("<I", raw)[0]
        if k == key:
            found = True
            if index is None:
                if t not in INT:
                    sys.exit("gguf_set: %s is not an integer" % key.decode())
                if not fits(t, val):
                    t = wide(val)
                raw = struct.pack(FMT[t], val)
            else:
                rr = Reader(b)
                rr.o = body_start
                et, n = rr.take("<I"), rr.take("<Q")
                if t != 9 or et not in INT or index >= n:
                    sys.exit("gguf_set: %s has no integer element %d" % (key.decode(), index))
                vals = [rr.take(FMT[et]) for _ in range(n)]
                vals[index] = val
                if not all(fits(et, v) for v in vals):
                    et = wide(val)
                raw = struct.pack("<IQ", et, n) + b"".join(struct.pack(FMT[et], v) for v in vals)
        out.append(struct.pack("<Q", len(k)) + k + struct.pack("<I", t) + raw)
    if not found:
        sys.exit("gguf_set: no key %s" % key.decode())
    for _ in range(n_t):   # tensor infos: name, n_dims, dims, type, offset
        start = r.o
        r.string()
        nd = r.take("<I")
        r.raw(8 * nd + 4 + 8)
        out.append(b[start:r.o])
    data_start = (r.o + align - 1) // align * align
    head = b"".join(out)
    head += b"\0" * ((-len(head)) % align)
    with open(dst, "wb") as f:
        f.write(head)
        f.write(b[data_start:])


if __name__ == "__main__":
    main()
