#!/usr/bin/env python3
"""Correctness check of one running forwarder (`smoke.py PORT`), run by scripts/eval-io-uring on every
variant before it is measured: replies in order across backends, and malformed input answered with a
CLIENT_ERROR and a close, never a hang or a crash. Exits non-zero on any difference."""
import socket
import sys

port = int(sys.argv[1])


def talk(data):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    s.settimeout(3)
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            return out
        out += b


def value(i):
    return str(i).encode()


cases = [
    (b"set a 0 0 3\r\nabc\r\nget a\r\nget zz\r\n", b"STORED\r\nVALUE a 0 3\r\nabc\r\nEND\r\nEND\r\n"),
    (b"get a\r\nget a b\r\nget a\r\n",
     b"VALUE a 0 3\r\nabc\r\nEND\r\nCLIENT_ERROR command not supported by this experiment\r\n"),
    (b"set a 0 0 1\r\nxyz\r\n", b"CLIENT_ERROR bad data chunk\r\n"),
    (b"x" * 5000, b"CLIENT_ERROR line too long\r\n"),
    (bytes(range(256)) * 10, b"CLIENT_ERROR bad command line format\r\n"),
    # 200 sets then 200 gets in one pipeline, spread over every backend: answers in request order.
    (b"".join(b"set k%d 0 0 %d\r\n%s\r\n" % (i, len(value(i)), value(i)) for i in range(200))
     + b"".join(b"get k%d\r\n" % i for i in range(200)),
     b"STORED\r\n" * 200
     + b"".join(b"VALUE k%d 0 %d\r\n%s\r\nEND\r\n" % (i, len(value(i)), value(i)) for i in range(200))),
]
failed = 0
for sent, want in cases:
    got = talk(sent)
    if got != want:
        failed += 1
        print(f"FAIL: sent {sent[:40]!r}…\n  want {want[:80]!r}\n  got  {got[:80]!r}", file=sys.stderr)
print(f"smoke: {len(cases) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
