#!/usr/bin/env python3
"""Regenerates testdata/cluster-keyslot/keyslots.tsv: the hash slot a real Redis Cluster node gives
each key (`CLUSTER KEYSLOT`), for `shardring_resp::key_slot`.

Starts one `redis-server --cluster-enabled yes` on a free 127.0.0.1 port in a temporary directory (a
node of no cluster answers CLUSTER KEYSLOT as any node does: the slot is computed, not looked up),
sends every key as one pipelined batch of RESP commands over a socket (so binary keys, `\\r\\n` and
NUL included, arrive as they are), and kills the server.

Keys: every key of keys.py with the empty key, then a fixed-seed set of shapes that exercise the hash
tag rule and the checksum: random bytes over the whole 0..255 range, random strings over a small
alphabet heavy in `{` and `}`, tags at every position, empty and nested tags, and long keys (to 16 KiB).

Writes `# redis-server: VERSION`, `# keys: N`, then HEXKEY<TAB>slot.

Usage: scripts/regen-golden/cluster_keyslot.py   (from the repository root; needs redis-server and
Python 3)
"""
import os
import random
import socket
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "scripts", "regen-golden")
sys.path.insert(0, HERE)
from keys import keys  # noqa: E402
from nutcracker_harness import free_port, wait_listening  # noqa: E402

OUT = os.path.join(ROOT, "testdata", "cluster-keyslot", "keyslots.tsv")


def cluster_keys():
    """The key set: keys.py's, then the cluster-specific shapes, deduplicated, in a fixed order."""
    rnd = random.Random(20261206)
    out = list(keys(include_empty=True))
    # the hash-tag edge cases of the Redis Cluster specification and cluster.c
    out += [b"{user1000}.following", b"{user1000}.followers", b"user1000", b"foo{}{bar}", b"foo{{bar}}zap",
            b"foo{bar}{zap}", b"bar", b"{bar", b"zap", b"{", b"}", b"{}", b"}{", b"{}}", b"{{}}",
            b"{{}", b"a{b}c{d}", b"{a}", b"a", b"123456789", b"{123456789}", b"x{123456789}y",
            b"\x00", b"{\x00}", b"\x00{\x00}\x00", b"\r\n", b"{\r\n}", b"\xff" * 4, b"{\xff}"]
    # random bytes over the whole range, short to medium
    for _ in range(500):
        out.append(bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 64))))
    # a small alphabet heavy in braces: every arrangement of tags, empty tags and strays
    for _ in range(600):
        out.append(bytes(rnd.choice(b"{{}}ab\x00\xfe") for _ in range(rnd.randrange(1, 24))))
    # a tag at every position of a short key, with random contents (maybe empty, maybe binary)
    for _ in range(200):
        pre = bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 8))).replace(b"{", b"")
        tag = bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 8))).replace(b"}", b"")
        post = bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 8)))
        out.append(pre + b"{" + tag + b"}" + post)
    # long keys, a tag inside some of them
    for n in (255, 256, 1000, 4096, 16384):
        out.append(bytes(rnd.randrange(256) for _ in range(n)))
        body = bytes(rnd.randrange(0x61, 0x7b) for _ in range(n))
        out.append(body[: n // 2] + b"{tag}" + body[n // 2:])
    seen, uniq = set(), []
    for k in out:
        if k not in seen:
            seen.add(k)
            uniq.append(k)
    return uniq


def command(*args):
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def read_line(f):
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("closed mid-reply")
    return line[:-2]


def main():
    ks = cluster_keys()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        server = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", os.path.join(tmp, "nodes.conf"), "--dir", tmp, "--save", "",
             "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_listening(port, server)
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                f = s.makefile("rb")
                s.sendall(command(b"INFO", b"server"))
                header = read_line(f)
                info = f.read(int(header[1:]) + 2).decode()
                version = next(l.split(":")[1] for l in info.splitlines()
                               if l.startswith("redis_version:"))
                s.sendall(b"".join(command(b"CLUSTER", b"KEYSLOT", k) for k in ks))
                slots = []
                for k in ks:
                    reply = read_line(f)
                    if not reply.startswith(b":"):
                        raise RuntimeError(f"CLUSTER KEYSLOT {k.hex()}: {reply!r}")
                    slots.append(int(reply[1:]))
        finally:
            server.kill()
            server.wait()
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as out:
        out.write(f"# redis-server: {version}\n# keys: {len(ks)}\n")
        for k, slot in zip(ks, slots):
            out.write(f"{k.hex()}\t{slot}\n")
    print(f"wrote {len(ks)} keys to {OUT} from redis-server {version}")


if __name__ == "__main__":
    main()
