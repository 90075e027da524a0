#!/usr/bin/env python3
"""Regenerates testdata/twemproxy/: where nutcracker 0.5.0 (Debian's package) puts each key.

Starts memcached servers on 127.0.0.1 (ports 31001-31040, and 11211 for the port-11211 pool) and, per
pool, a nutcracker in front of them; sets every key through nutcracker, then asks every backend directly
which keys it holds. Writes <pool>.yml (the configuration nutcracker ran) and <pool>.tsv
(HEXKEY<TAB>server, the server as shardring names it: its name, else host:port).

Needs: apt-get install -y nutcracker memcached. Usage: scripts/regen-golden/twemproxy.py (repo root).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "scripts", "regen-golden")
OUT = os.path.join(ROOT, "testdata", "twemproxy")
sys.path.insert(0, HERE)
from keys import keys  # noqa: E402
from nutcracker_harness import Harness, free_port  # noqa: E402

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
    ("modula-unequal-fnv1a_64", dict(hash="fnv1a_64", distribution="modula"), UNEQUAL),
    ("modula-named-crc32", dict(hash="crc32", distribution="modula"), NAMED),
    ("modula-many40-md5", dict(hash="md5", distribution="modula"), MANY40),
    ("modula-hashtag-jenkins", dict(hash="jenkins", distribution="modula", hash_tag='"{}"'), EQUAL3),
]


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
            for port, _, _ in servers:
                h.start_memcached(port)
            listen = free_port()
            text = pool_yaml(name, listen, opts, servers)
            where, refused = h.run_pool(text, listen, ks, [s[0] for s in servers])
            by_port = {s[0]: display(s) for s in servers}
            with open(os.path.join(OUT, name + ".yml"), "w") as f:
                f.write(text.replace(f"127.0.0.1:{listen}", "127.0.0.1:22121"))
            with open(os.path.join(OUT, name + ".tsv"), "w") as f:
                f.write(f"# pool: {name}.yml\n# refused: {len(refused)}\n")
                for k in ks:
                    if k in where:
                        f.write(f"{k.hex()}\t{by_port[where[k]]}\n")
            print(f"{name}: {len(where)} keys, {len(refused)} refused"
                  + (f" e.g. {refused[0]!r}" if refused else ""))
    finally:
        h.close()


if __name__ == "__main__":
    main()
