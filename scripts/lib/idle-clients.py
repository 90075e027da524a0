#!/usr/bin/env python3
"""Opens N client connections to a proxy and reports the proxy's resident memory at each stage.

Stages, each measured after the proxy has settled (RSS read from /proc/PID/status, VmRSS; after the
requests and after the close, two seconds first: memory an allocator frees goes back to the system
after a delay, about a second for shardring's):
  start    before any client connects
  idle     N clients connected, none has sent a byte
  active   after one request from each client (all N in flight together, then every answer read)
  closed   after every client closed (and a short pause: allocators return memory lazily)

Prints one JSON object: the four RSS figures in KiB and N. Used by scripts/bench-client-memory.

Usage: idle-clients.py PID HOST:PORT N memcache|redis
"""
import json
import os
import resource
import selectors
import socket
import sys
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit(f"no VmRSS for pid {pid}")


def settle(pid, secs=1.0):
    """The RSS once it has stopped moving (at most a few seconds)."""
    last = rss_kib(pid)
    for _ in range(int(secs * 10) * 5):
        time.sleep(0.1)
        now = rss_kib(pid)
        if now == last:
            return now
        last = now
    return last


def main():
    pid, addr, n, proto = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    host, port = addr.rsplit(":", 1)
    port = int(port)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if n + 64 > hard:
        raise SystemExit(f"{n} clients need {n + 64} descriptors; the limit here is {hard}")
    request, answer = {
        "memcache": (b"get idle-client-key\r\n", b"END\r\n"),
        # RESP, not an inline command: nutcracker parses only RESP arrays.
        "redis": (b"*2\r\n$3\r\nGET\r\n$15\r\nidle-client-key\r\n", b"$-1\r\n"),
    }[proto]

    start = settle(pid)
    socks = []
    # A source network of its own for each run: the clients close first, so their ports stay in
    # TIME_WAIT for a minute after a run.
    net = 1 + os.getpid() % 250
    for i in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Source addresses spread over 127.0.0.0/8 so that N is not bounded by one address's
        # ephemeral ports.
        s.bind((f"127.{net}.{i // 20000}.2", 0))
        s.connect((host, port))
        socks.append(s)
    idle = settle(pid, 2.0)

    for s in socks:
        s.sendall(request)
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    got = {s.fileno(): b"" for s in socks}
    waiting = len(socks)
    deadline = time.time() + 60
    while waiting and time.time() < deadline:
        for key, _ in sel.select(timeout=1):
            s = key.fileobj
            data = s.recv(4096)
            got[s.fileno()] += data
            if got[s.fileno()] == answer or not data:
                sel.unregister(s)
                waiting -= 1
    wrong = sum(1 for v in got.values() if v != answer)
    if wrong:
        sample = next(v for v in got.values() if v != answer)
        raise SystemExit(f"{wrong} of {n} clients did not get {answer!r} (one got {sample!r})")
    time.sleep(2.0)
    active = settle(pid, 2.0)

    for s in socks:
        s.close()
    time.sleep(2.0)
    closed = settle(pid, 2.0)
    print(json.dumps({"n": n, "start": start, "idle": idle, "active": active, "closed": closed}))


if __name__ == "__main__":
    main()
