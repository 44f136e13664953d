#!/usr/bin/env python3
"""smoke.py - checks that a running server of bench/net behaves before it is
benchmarked (a server that answers wrong must not look fast), and doubles as
an end-to-end test of mote's example servers.

    smoke.py echo HOST:PORT     bytes come back unchanged, whatever the size
    smoke.py http HOST:PORT [--strict]
                                keep-alive, pipelining, HEAD, bodies,
                                Connection: close, HTTP/1.0, 400 on garbage;
                                --strict adds what examples/http_hello.c does
                                and Go's net/http does not (400 on obs-fold
                                and on a head over 8 KiB, 501 on a chunked
                                body)

Both mote's servers (examples/) and the Go peers (bench/net/*.go) pass.
Exits 0 when all checks pass, else prints the first failure and exits 1.
Standard library only.
"""
import os
import socket
import sys

TIMEOUT = 5.0


class Fail(Exception):
    pass


def connect(addr):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=TIMEOUT)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise Fail("connection closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return buf


# ------------------------------------------------------------------ echo
def check_echo(addr):
    s = connect(addr)
    for size in (1, 512, 4096, 16384, 100000):
        data = os.urandom(size)
        s.sendall(data)
        if recv_exact(s, size) != data:
            raise Fail("echo of %d bytes differs" % size)
    s.shutdown(socket.SHUT_WR)
    if s.recv(1) != b"":
        raise Fail("echo: no EOF after the client's half-close")
    s.close()
    # several connections at once, interleaved
    conns = [connect(addr) for _ in range(8)]
    for i, c in enumerate(conns):
        c.sendall(bytes([i]) * 1000)
    for i, c in enumerate(conns):
        if recv_exact(c, 1000) != bytes([i]) * 1000:
            raise Fail("echo: connection %d got another's bytes" % i)
        c.close()


# ------------------------------------------------------------------ http
class Reader:
    """Reads HTTP/1.1 responses off a socket (Content-Length framing)."""

    def __init__(self, s):
        self.s, self.buf = s, b""

    def fill(self):
        chunk = self.s.recv(65536)
        if not chunk:
            return False
        self.buf += chunk
        return True

    def response(self, head_only=False):
        while b"\r\n\r\n" not in self.buf:
            if not self.fill():
                raise Fail("connection closed before a full response head (got %r)" % self.buf[:200])
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise Fail("bad status line %r" % lines[0])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        if head_only:
            n = 0
        elif "content-length" in headers:
            n = int(headers["content-length"])
        else:  # no length: the body runs to the close (RFC 9112 6.3)
            while self.fill():
                pass
            n = len(self.buf)
        while len(self.buf) < n:
            if not self.fill():
                raise Fail("connection closed inside a response body")
        body, self.buf = self.buf[:n], self.buf[n:]
        return int(parts[1]), headers, body

    def expect_eof(self, what):
        try:
            while self.fill():
                pass
        except ConnectionResetError:
            pass
        if self.buf:
            raise Fail("%s: bytes after the last response: %r" % (what, self.buf[:100]))


HELLO = b"Hello, World!\n"
GET = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n"


def expect_hello(r, what, head_only=False):
    status, headers, body = r.response(head_only)
    if status != 200:
        raise Fail("%s: status %d, want 200" % (what, status))
    if headers.get("content-length") != str(len(HELLO)):
        raise Fail("%s: Content-Length %r" % (what, headers.get("content-length")))
    if not head_only and body != HELLO:
        raise Fail("%s: body %r" % (what, body))
    return headers


def expect_refusal(addr, what, data, good=0, want=(400, 431)):
    """Sends data; wants `good` hellos, then an error status and a close."""
    s = connect(addr)
    r = Reader(s)
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may answer and close before reading it all
    for i in range(good):
        expect_hello(r, "%s: request %d" % (what, i + 1))
    try:
        status, _, _ = r.response()
    except ConnectionResetError:
        raise Fail("%s: connection reset instead of a %d" % (what, want[0]))
    if status not in want:
        raise Fail("%s: status %d, want %d" % (what, status, want[0]))
    r.expect_eof(what)
    s.close()


def check_http(addr, strict):
    # keep-alive: three requests, one at a time, on one connection
    s = connect(addr)
    r = Reader(s)
    for i in range(3):
        s.sendall(GET)
        expect_hello(r, "keep-alive request %d" % (i + 1))
    # pipelining: ten requests in one send
    s.sendall(GET * 10)
    for i in range(10):
        expect_hello(r, "pipelined request %d" % (i + 1))
    # HEAD: headers only, and the connection stays in step
    s.sendall(b"HEAD / HTTP/1.1\r\nHost: bench\r\n\r\n" + GET)
    expect_hello(r, "HEAD", head_only=True)
    expect_hello(r, "GET after HEAD")
    # a body is read and dropped, in pieces too
    s.sendall(b"POST /p HTTP/1.1\r\nHost: bench\r\nContent-Length: 11\r\n\r\nhello")
    s.sendall(b" world" + GET)
    expect_hello(r, "POST with a body")
    expect_hello(r, "GET after a POST body")
    # Connection: close is answered, then the server closes
    s.sendall(b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
    expect_hello(r, "Connection: close")
    r.expect_eof("Connection: close")
    s.close()

    # HTTP/1.0 closes unless asked otherwise
    s = connect(addr)
    r = Reader(s)
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    expect_hello(r, "HTTP/1.0")
    r.expect_eof("HTTP/1.0")
    s.close()
    s = connect(addr)
    r = Reader(s)
    s.sendall(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" * 2)
    expect_hello(r, "HTTP/1.0 keep-alive 1")
    expect_hello(r, "HTTP/1.0 keep-alive 2")
    s.close()

    # a request split into single bytes
    s = connect(addr)
    r = Reader(s)
    for b in GET:
        s.send(bytes([b]))
    expect_hello(r, "request sent byte by byte")
    s.close()

    # garbage, and a good request followed by garbage: 400 and a close
    expect_refusal(addr, "garbage", b"GARBAGE\r\n\r\n")
    expect_refusal(addr, "bad Content-Length",
                   b"POST / HTTP/1.1\r\nHost: bench\r\nContent-Length: 1x\r\n\r\n")
    expect_refusal(addr, "good then garbage", GET + b"\x16\x03\x01 nonsense\r\n\r\n", good=1)
    if strict:
        expect_refusal(addr, "oversized head (Go allows 1 MiB)",
                       b"GET / HTTP/1.1\r\nHost: bench\r\nX: " + b"x" * 20000 + b"\r\n\r\n")
        expect_refusal(addr, "obs-fold", b"GET / HTTP/1.1\r\nHost: bench\r\nX: 1\r\n 2\r\n\r\n")
        expect_refusal(addr, "chunked body",
                       b"POST / HTTP/1.1\r\nHost: bench\r\nTransfer-Encoding: chunked\r\n\r\n"
                       b"5\r\nhello\r\n0\r\n\r\n", want=(501,))


def main():
    args = [a for a in sys.argv[1:] if a != "--strict"]
    strict = len(args) < len(sys.argv) - 1
    if len(args) != 2 or args[0] not in ("echo", "http"):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    kind, addr = args
    try:
        if kind == "echo":
            check_echo(addr)
        else:
            check_http(addr, strict)
    except (Fail, OSError) as e:
        print("smoke %s %s: FAILED: %s" % (kind, addr, e), file=sys.stderr)
        return 1
    print("smoke %s %s: ok" % (kind, addr), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
