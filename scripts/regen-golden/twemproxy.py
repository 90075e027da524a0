#!/usr/bin/env python3
"""Regenerates testdata/twemproxy/: where nutcracker 0.5.0 (Debian's package) puts each key.

Starts memcached servers on 127.0.0.1 (ports 31001-31040, and 11211 for the port-11211 pool; redis
servers on 32001-32004 for the `redis: true` pools) and, per
pool, a nutcracker in front of them; sets every key through nutcracker, then asks every backend directly
which keys it holds. Writes <pool>.yml (the configuration nutcracker ran) and <pool>.tsv
(HEXKEY<TAB>server, the server as shardring names it: its name, else host:port).

Needs: apt-get install -y nutcracker memcached redis-server (the redis pools). Usage: scripts/regen-golden/twemproxy.py (repo root).
"""
import hashlib
import math
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "scripts", "regen-golden")
OUT = os.path.join(ROOT, "testdata", "twemproxy")
sys.path.insert(0, HERE)
from keys import keys  # noqa: E402
from nutcracker_harness import Conn, Harness, free_port  # noqa: E402

HASHES = ["one_at_a_time", "md5", "crc16", "crc32", "crc32a", "fnv1_64", "fnv1a_64", "fnv1_32", "fnv1a_32",
          "hsieh", "murmur", "jenkins"]


def srv(port, weight=1, name=None):
    return (port, weight, name)


EQUAL3 = [srv(31001), srv(31002), srv(31003)]
UNEQUAL = [srv(31001, 1), srv(31002, 2), srv(31003, 3), srv(31004, 5)]
NAMED = [srv(31001, 1, "alpha"), srv(31002, 2, "beta"), srv(31003, 1, "gamma-server"), srv(31004, 1, "d")]
PORT11211 = [srv(11211, 1), srv(31002, 1), srv(31003, 2)]
MANY40 = [srv(31001 + i, 1 + i % 4) for i in range(40)]
EQUAL40 = [srv(31001 + i) for i in range(40)]
REMOVED = [s for i, s in enumerate(MANY40) if i != 17]

POOLS = []
for h in HASHES:
    POOLS.append((f"ketama-equal3-{h}", dict(hash=h), EQUAL3))
POOLS += [
    ("ketama-unequal-default", {}, UNEQUAL),
    ("ketama-named-md5", dict(hash="md5"), NAMED),
    ("ketama-port11211-fnv1a_64", dict(hash="fnv1a_64"), PORT11211),
    ("ketama-many40-murmur", dict(hash="murmur"), MANY40),
    ("ketama-many40-removed17-murmur", dict(hash="murmur"), REMOVED),
    ("ketama-equal40-crc32a", dict(hash="crc32a"), EQUAL40),
    ("ketama-hashtag-braces-fnv1a_64", dict(hash="fnv1a_64", hash_tag='"{}"'), UNEQUAL),
    ("ketama-hashtag-dollars-md5", dict(hash="md5", hash_tag='"$$"'), EQUAL3),
    ("ketama-one-server", dict(hash="md5"), [srv(31001)]),
    # Names past nutcracker's 272-byte point-name limit: every point name is cut to the same 272 bytes.
    ("ketama-longnames-md5", dict(hash="md5"),
     [srv(31001, 1, "a" * 300), srv(31002, 1, "b" * 268), srv(31003, 2, "c" * 271), srv(31004, 1, "short")]),
    ("modula-unequal-fnv1a_64", dict(hash="fnv1a_64", distribution="modula"), UNEQUAL),
    ("modula-named-crc32", dict(hash="crc32", distribution="modula"), NAMED),
    ("modula-many40-md5", dict(hash="md5", distribution="modula"), MANY40),
    ("modula-hashtag-jenkins", dict(hash="jenkins", distribution="modula", hash_tag='"{}"'), EQUAL3),
    # redis: true, in front of redis servers: binary-safe keys, so also the empty key and keys with
    # spaces, control bytes and NUL that the memcached protocol cannot carry.
    ("redis-ketama-unequal-fnv1a_64", dict(hash="fnv1a_64", redis="true"), UNEQUAL),
    ("redis-ketama-named-crc16-hashtag", dict(hash="crc16", redis="true", hash_tag='"{}"'), NAMED),
    ("redis-modula-unequal-murmur", dict(hash="murmur", redis="true", distribution="modula"), UNEQUAL),
]

# Keys only a binary-safe protocol carries.
REDIS_EXTRA = [b"", b"a b", b" ", b"\x00", b"a\x00b", b"\r\n", b"tab\there", b"{a b}c", b"\x01\x02\x7f",
               b"{}", b"{\x00}x", b"x" * 1000]


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def ketama_points(name, n):
    """nutcracker's points of a server of weight 1 among n equal ones (single-precision count)."""
    pct = f32(f32(1.0) / f32(n))
    t = f32(f32(f32(pct * f32(160.0)) / f32(4.0)) * f32(n))
    count = math.floor(f32(t + 1e-10)) * 4
    out = []
    for i in range(count // 4):
        d = hashlib.md5(f"{name}-{i}".encode()).digest()
        out += [struct.unpack("<I", d[4 * k:4 * k + 4])[0] for k in range(4)]
    return out


def ties_pool():
    """A pool where two servers' points collide, with keys that land on the collision.

    400 named servers t5-0..t5-399 (hash md5): t5-96 and t5-267 share a point. nutcracker sorts its
    servers by name length, then bytes, so t5-96 (shorter) should own it, although t5-267 sorts first
    byte-wise and comes first in the file here. t5-96 is on port 31001, t5-267 on 31002, the other 398
    on 31003 (nutcracker only forbids duplicate names). Returns (servers, keys, {port: name})."""
    n = 400
    names = [f"t5-{i}" for i in range(n)]
    owners = {}
    for nm in names:
        for p in ketama_points(nm, n):
            owners.setdefault(p, set()).add(nm)
    tie = next(p for p, o in owners.items() if o == {"t5-96", "t5-267"})
    prev = max(p for p in owners if p < tie)
    keys, j = [], 0
    while len(keys) < 8:
        k = f"tie-key-{j}".encode()
        h = struct.unpack("<I", hashlib.md5(k).digest()[:4])[0]
        if prev < h <= tie:
            keys.append(k)
        j += 1
    order = ["t5-267", "t5-96"] + [nm for nm in names if nm not in ("t5-96", "t5-267")]
    port = {"t5-96": 31001, "t5-267": 31002}
    servers = [srv(port.get(nm, 31003), 1, nm) for nm in order]
    return servers, keys + [f"plain-{i}".encode() for i in range(400)], {31001: "t5-96", 31002: "t5-267"}


def display(server):
    port, _, name = server
    return name or f"127.0.0.1:{port}"


def pool_yaml(name, listen, opts, servers):
    lines = [f"{name.replace('-', '_')}:", f"  listen: 127.0.0.1:{listen}"]
    for k, v in opts.items():
        lines.append(f"  {k}: {v}")
    lines.append("  servers:")
    for port, weight, sname in servers:
        lines.append(f"   - 127.0.0.1:{port}:{weight}" + (f" {sname}" if sname else ""))
    return "\n".join(lines) + "\n"


def main():
    os.makedirs(OUT, exist_ok=True)
    ks = keys()
    h = Harness()
    try:
        for name, opts, servers in POOLS:
            redis = opts.get("redis") == "true"
            pool_keys = list(dict.fromkeys([b""] + ks + REDIS_EXTRA[1:])) if redis else ks
            # Redis pools use the same ports plus 1000.
            if redis:
                servers = [(p + 1000, w, nm) for p, w, nm in servers]
            for port, _, _ in servers:
                (h.start_redis if redis else h.start_memcached)(port)
            listen = free_port()
            text = pool_yaml(name, listen, opts, servers)
            where, refused = h.run_pool(text, listen, pool_keys, [s[0] for s in servers], redis=redis)
            ks_written = pool_keys
            by_port = {s[0]: display(s) for s in servers}
            with open(os.path.join(OUT, name + ".yml"), "w") as f:
                f.write(text.replace(f"127.0.0.1:{listen}", "127.0.0.1:22121"))
            with open(os.path.join(OUT, name + ".tsv"), "w") as f:
                f.write(f"# pool: {name}.yml\n# refused: {len(refused)}\n")
                for k in ks_written:
                    if k in where:
                        f.write(f"{k.hex()}\t{by_port[where[k]]}\n")
            print(f"{name}: {len(where)} keys, {len(refused)} refused"
                  + (f" e.g. {refused[0]!r}" if refused else ""))
        # Ejection: auto_eject_hosts with server_failure_limit 1 and a long retry timeout; the memcached of
        # one server is killed and requests are sent until nutcracker ejects it, then every key is stored.
        # nutcracker rebuilds its continuum from the live servers only, which the ring reproduces by
        # removing the ejected server.
        name = "ketama-ejected-fnv1a_64"
        servers = UNEQUAL
        for port, _, _ in servers:
            h.start_memcached(port)
        ejected = 31002

        def eject(listen_port):
            # Store probe keys until one fails on the dead server (a set reports the failure; the first
            # one ejects the server, since server_failure_limit is 1).
            h.stop_memcached(ejected)
            c = Conn(listen_port)
            for i in range(1000):
                if c.cmd(b"set eject-probe-%d 0 0 1\r\nx\r\n" % i).startswith(b"SERVER_ERROR"):
                    break
            else:
                raise RuntimeError("nutcracker never reported the dead server")
            c.close()

        listen = free_port()
        opts = dict(hash="fnv1a_64", auto_eject_hosts="true", server_failure_limit=1,
                    server_retry_timeout=600000)
        text = pool_yaml(name, listen, opts, servers)
        where, refused = h.run_pool(text, listen, ks, [p for p, _, _ in servers if p != ejected],
                                    before=eject)
        by_port = {s[0]: display(s) for s in servers}
        with open(os.path.join(OUT, name + ".yml"), "w") as f:
            f.write(text.replace(f"127.0.0.1:{listen}", "127.0.0.1:22121"))
        with open(os.path.join(OUT, name + ".tsv"), "w") as f:
            f.write(f"# pool: {name}.yml\n# refused: {len(refused)}\n# ejected: 127.0.0.1:{ejected}\n")
            for k in ks:
                if k in where:
                    f.write(f"{k.hex()}\t{by_port[where[k]]}\n")
        print(f"{name}: {len(where)} keys, {len(refused)} refused, 127.0.0.1:{ejected} ejected")

        # The tie pool: only the keys that landed on the two colliding servers are recorded (the other
        # 398 servers share one memcached, so a key there cannot be told apart).
        servers, tie_keys, names = ties_pool()
        for port in (31001, 31002, 31003):
            h.start_memcached(port)
        listen = free_port()
        name = "ketama-ties-md5"
        text = pool_yaml(name, listen, dict(hash="md5"), servers)
        where, refused = h.run_pool(text, listen, tie_keys, [31001, 31002, 31003])
        with open(os.path.join(OUT, name + ".yml"), "w") as f:
            f.write(text.replace(f"127.0.0.1:{listen}", "127.0.0.1:22121"))
        kept = [k for k in tie_keys if where.get(k) in names]
        with open(os.path.join(OUT, name + ".tsv"), "w") as f:
            f.write(f"# pool: {name}.yml\n# refused: {len(refused)}\n")
            f.write("# only keys on the two colliding servers (t5-96, t5-267); the first 8 hit the shared point\n")
            for k in kept:
                f.write(f"{k.hex()}\t{names[where[k]]}\n")
        print(f"{name}: {len(kept)} keys recorded, tie keys on "
              f"{sorted({names.get(where.get(k), '?') for k in tie_keys[:8]})}")
    finally:
        h.close()


if __name__ == "__main__":
    main()
