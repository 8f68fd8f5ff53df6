#!/usr/bin/env python3
"""mtp_split.py IN MAIN_OUT MTP_OUT -- split a GGUF with an MTP block
(ds4-synth --mtp) into the main model without the mtp.0.* tensors and a
sidecar holding only them (both keep all metadata), as published MTP
sidecars come; tests/t_mtp.sh loads the pair with --mtp.  Tensor data is
copied unchanged, re-aligned behind the rewritten headers.
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_set import Reader, value  # noqa: E402


def write(path, head_kv, n_kv, tensors, b, data_start, align):
    out = [struct.pack("<IIQQ", 0x46554747, 3, len(tensors), n_kv), head_kv]
    off, blobs = 0, []
    for name, nd, dims, typ, toff, size in tensors:
        off = (off + align - 1) // align * align
        out.append(struct.pack("<Q", len(name)) + name + struct.pack("<I", nd) + dims +
                   struct.pack("<IQ", typ, off))
        blobs.append((off, b[data_start + toff:data_start + toff + size]))
        off += size
    head = b"".join(out)
    head += b"\0" * ((-len(head)) % align)
    with open(path, "wb") as f:
        f.write(head)
        pos = 0
        for o, blob in blobs:
            f.write(b"\0" * (o - pos))
            f.write(blob)
            pos = o + len(blob)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    b = open(sys.argv[1], "rb").read()
    r = Reader(b)
    magic, version, n_t, n_kv = r.take("<I"), r.take("<I"), r.take("<Q"), r.take("<Q")
    if magic != 0x46554747 or version != 3:
        sys.exit("mtp_split: not a GGUF v3 file")
    kv_start, align = r.o, 32
    for _ in range(n_kv):
        k = r.string()
        t = r.take("<I")
        raw = value(r, t)
        if k == b"general.alignment":
            align = struct.unpack("<I", raw)[0]
    head_kv = b[kv_start:r.o]
    infos = []
    for _ in range(n_t):
        name = r.string()
        nd = r.take("<I")
        dims = r.raw(8 * nd)
        typ, off = r.take("<I"), r.take("<Q")
        infos.append([name, nd, dims, typ, off, 0])
    data_start = (r.o + align - 1) // align * align
    ends = sorted(i[4] for i in infos) + [len(b) - data_start]
    for i in infos:   # a tensor's bytes run to the next tensor's offset
        i[5] = min(e for e in ends if e > i[4]) - i[4]
    mtp = [i for i in infos if i[0].startswith(b"mtp.0.")]
    if not mtp:
        sys.exit("mtp_split: no mtp.0.* tensors in %s" % sys.argv[1])
    write(sys.argv[2], head_kv, n_kv, [i for i in infos if not i[0].startswith(b"mtp.0.")], b,
          data_start, align)
    write(sys.argv[3], head_kv, n_kv, mtp, b, data_start, align)


if __name__ == "__main__":
    main()
