#!/usr/bin/env python3
"""Regenerates testdata/uhashring/: where uhashring (PyPI; `pip install uhashring`) puts each key in its
ketama mode, `HashRing(nodes, hash_fn="ketama")`.

Keys are Python str (uhashring hashes str(key).encode("utf-8")), so only the keys that are valid UTF-8
are used. Writes <config>.tsv: a header (`# uhashring:` version, `# vnodes:`, `# nodes: name=weight ...`
in insertion order, `# removed:` when a node was removed after building), then HEXKEY<TAB>node.

Usage: scripts/regen-golden/uhashring_golden.py   (from the repository root)
"""
import hashlib
import os
import struct
import sys

from importlib.metadata import version

from uhashring import HashRing

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "regen-golden"))
from keys import keys  # noqa: E402

OUT = os.path.join(ROOT, "testdata", "uhashring")

EQUAL3 = [(f"127.0.0.1:{31001 + i}", 1) for i in range(3)]
UNEQUAL = [("127.0.0.1:31001", 1), ("127.0.0.1:31002", 2), ("127.0.0.1:31003", 3), ("127.0.0.1:31004", 5)]
NAMED = [("alpha", 1), ("beta", 2), ("gamma-server", 1), ("d", 1)]
PORT11211 = [("10.0.0.1:11211", 1), ("10.0.0.2:11211", 1), ("10.0.0.3:11212", 2)]
MANY40 = [(f"10.1.{i // 10}.{i % 10 + 1}:11211", 1 + i % 4) for i in range(40)]
EQUAL40 = [(f"10.1.{i // 10}.{i % 10 + 1}:11211", 1) for i in range(40)]

CONFIGS = [
    ("equal3", EQUAL3, 40, None),
    ("unequal", UNEQUAL, 40, None),
    ("named", NAMED, 40, None),
    ("port11211", PORT11211, 40, None),
    ("many40", MANY40, 40, None),
    ("many40-removed17", MANY40, 40, MANY40[17][0]),
    ("equal40", EQUAL40, 40, None),
    ("equal3-vnodes160", EQUAL3, 160, None),
    ("one-node", [("solo", 1)], 40, None),
    # Ties: among u0-0..u0-399, u0-85 and u0-286 share a point. uhashring maps points to nodes in a
    # dict, so the node added last wins; u0-85 is added last here (byte order would favour u0-286).
    ("ties400", [(f"u0-{i}", 1) for i in range(400) if i != 85] + [("u0-85", 1)], 40, None),
]


def md5_u32(data):
    return struct.unpack("<I", hashlib.md5(data).digest()[:4])[0]


def tie_keys(nodes):
    """Keys whose MD5 falls where uhashring's bisect_right picks the point u0-85 and u0-286 share."""
    points = {}
    for name, _ in nodes:
        for w in range(40):
            d = hashlib.md5(f"{name}-{w}".encode()).digest()
            for k in range(4):
                points.setdefault(struct.unpack("<I", d[4 * k:4 * k + 4])[0], set()).add(name)
    tie = next(p for p, owners in points.items() if owners == {"u0-85", "u0-286"})
    low = max(p for p in points if p < tie)
    keys, j = [], 0
    while len(keys) < 8:
        k = f"tie-key-{j}"
        if low <= md5_u32(k.encode()) < tie:
            keys.append((k.encode(), k))
        j += 1
    return keys


def main():
    os.makedirs(OUT, exist_ok=True)
    ks = []
    for k in keys(include_empty=True):
        try:
            ks.append((k, k.decode("utf-8")))
        except UnicodeDecodeError:
            pass
    for name, nodes, vnodes, removed in CONFIGS:
        ring = HashRing({n: {"weight": w} for n, w in nodes}, hash_fn="ketama", vnodes=vnodes)
        if removed:
            ring.remove_node(removed)
        with open(os.path.join(OUT, name + ".tsv"), "w") as f:
            f.write(f"# uhashring: {version('uhashring')}\n")
            f.write(f"# vnodes: {vnodes}\n")
            f.write("# nodes: " + " ".join(f"{n}={w}" for n, w in nodes if n != removed) + "\n")
            if removed:
                f.write(f"# removed: {removed}\n")
            for raw, s in (tie_keys(nodes) + ks if name == "ties400" else ks):
                f.write(f"{raw.hex()}\t{ring.get_node(s)}\n")
        print(f"{name}: {len(ks)} keys")


if __name__ == "__main__":
    main()
