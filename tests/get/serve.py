#!/usr/bin/env python3
"""serve.py -- the misbehaving HTTP file server of tests/t_get.sh.

Serves the files of --root with single byte-range support (206 / 416), on a
free port (--port 0) written to --port-file, and logs one JSON line per
request to --log: {"path", "range", "auth", "status"}.  Standard library only.

A request path is /OPT/OPT/.../NAME: the options say how to misbehave (they
compose, e.g. /hub/drop=1000000/f.bin):
  hub          answer 302 to the same path without "hub", with the headers the
               Hugging Face hub sends for an LFS file: X-Linked-Etag (the
               file's SHA-256, quoted) and X-Linked-Size
  hubsha=HEX   the X-Linked-Etag to send instead of the true SHA-256
  drop=N       a response that covers byte N (starting before it) sends the
               bytes before N, then the connection is closed: once per
               download, since the resumed request starts at N
  cut=N        every response stops at byte N (a resumed request gets nothing)
  stall=N      the first response to cover byte N sends the bytes before it,
               then holds the connection open, sending nothing
  norange      ignore Range: always 200 with the whole file
  corrupt=N    byte N is sent with its bits flipped
  status=CODE  answer CODE (an error page)
  flaky=K      the first K requests of this path get 503
  slow=BPS     send about BPS bytes per second
  skew=K       206 answers claim and send bytes from START+K (a broken resume)
"""
import argparse
import hashlib
import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
LOG_LOCK = threading.Lock()
COUNT_LOCK = threading.Lock()
COUNTS = {}          # path -> requests seen (flaky)
STALLED = set()      # paths whose stall was served
SHA_CACHE = {}


def file_sha(path):
    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in SHA_CACHE:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        SHA_CACHE[key] = h.hexdigest()
    return SHA_CACHE[key]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"     # one request per connection: a drop is a close

    def log_message(self, fmt, *args):   # quiet: the JSON log says it all
        pass

    def log_request_json(self, status):
        rec = {"path": self.path, "range": self.headers.get("Range"),
               "auth": self.headers.get("Authorization"), "status": status}
        with LOG_LOCK:
            with open(ARGS.log, "a") as f:
                f.write(json.dumps(rec) + "\n")

    def error_page(self, code, text):
        body = (text + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.log_request_json(code)

    def do_GET(self):
        parts = [p for p in self.path.split("?")[0].split("/") if p]
        if not parts:
            return self.error_page(404, "no file")
        name, opts = parts[-1], {}
        for p in parts[:-1]:
            k, _, v = p.partition("=")
            opts[k] = v
        path = os.path.join(ARGS.root, os.path.basename(name))
        if "flaky" in opts:
            with COUNT_LOCK:
                COUNTS[self.path] = COUNTS.get(self.path, 0) + 1
                n = COUNTS[self.path]
            if n <= int(opts["flaky"]):
                return self.error_page(503, "busy, try later")
        if "status" in opts:
            return self.error_page(int(opts["status"]), "status %s" % opts["status"])
        if not os.path.isfile(path):
            return self.error_page(404, "Entry not found")
        size = os.path.getsize(path)
        if "hub" in opts:
            rest = "/".join(p for p in parts if p != "hub")
            self.send_response(302)
            self.send_header("Location", "/" + rest)
            self.send_header("X-Linked-Etag", '"%s"' % opts.get("hubsha", file_sha(path)))
            self.send_header("X-Linked-Size", str(size))
            self.send_header("Content-Length", "0")
            self.end_headers()
            self.log_request_json(302)
            return

        start, end, status = 0, size - 1, 200
        rng = self.headers.get("Range")
        if rng and "norange" not in opts:
            if not rng.startswith("bytes=") or "," in rng:
                return self.error_page(400, "bad range")
            a, _, b = rng[6:].partition("-")
            start = int(a)
            if b:
                end = min(int(b), size - 1)
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0")
                self.end_headers()
                self.log_request_json(416)
                return
            status = 206
        claimed = start + int(opts.get("skew", 0)) if status == 206 else start
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - claimed + 1))
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (claimed, end, size))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self.log_request_json(status)

        # where this response stops early, if it does
        stop, stall = end + 1, False
        if "drop" in opts and claimed < int(opts["drop"]) <= end:
            stop = int(opts["drop"])
        if "cut" in opts:
            stop = min(stop, max(claimed, int(opts["cut"])))
        if "stall" in opts and claimed < int(opts["stall"]) <= end:
            with COUNT_LOCK:
                if self.path not in STALLED:
                    STALLED.add(self.path)
                    stop, stall = min(stop, int(opts["stall"])), True
        corrupt = int(opts["corrupt"]) if "corrupt" in opts else -1
        bps = int(opts["slow"]) if "slow" in opts else 0
        chunk = 16384 if bps else 1 << 20
        try:
            with open(path, "rb") as f:
                f.seek(claimed)
                off = claimed
                while off < stop:
                    data = bytearray(f.read(min(chunk, stop - off)))
                    if not data:
                        break
                    if off <= corrupt < off + len(data):
                        data[corrupt - off] ^= 0xFF
                    self.wfile.write(data)
                    off += len(data)
                    if bps:
                        self.wfile.flush()
                        time.sleep(len(data) / bps)
            self.wfile.flush()
            if stall:
                time.sleep(120)
            if stop <= end:   # closing short of Content-Length: the client sees a drop
                self.connection.shutdown(socket.SHUT_RDWR)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        self.close_connection = True


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", required=True)
    ARGS = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    srv.daemon_threads = True
    tmp = ARGS.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, ARGS.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
