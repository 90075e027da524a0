"""lookup and lookup_many over 1,000,000 keys against uhashring's get_node (scripts/bench-python).

The keys (``user:<16 hex digits>``, from a fixed seed, as str and as bytes) are made before any timing;
1M keys (about 75 MB of Python objects) are far larger than the CPU caches, as users' key sets are.
Each figure is the best of ROUNDS runs over every key, in nanoseconds per key, with the loop that
calls one lookup per key written the same way for every ring (a list comprehension over a bound
method). Rings: 10 nodes of weights 1, 2, 3 (repeating); uhashring in its ketama mode, shardring's
drop-in and ``compat="uhashring"`` (the same placement: MD5 per key), and the library's default ring
(xxh3).
"""

from __future__ import annotations

import json
import platform
import random
import sys
import time

import uhashring

import shardring
import shardring.uhashring

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
N = 1_000_000

rng = random.Random(30)
keys = [f"user:{rng.getrandbits(64):016x}" for _ in range(N)]
bkeys = [k.encode() for k in keys]
nodes = {f"10.0.0.{i}:11211": 1 + i % 3 for i in range(10)}


def best(fn, n: int) -> float:
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) / n * 1e9


theirs = uhashring.HashRing(nodes, hash_fn="ketama")
dropin = shardring.uhashring.HashRing(nodes, hash_fn="ketama")
compat = shardring.Ring(nodes, compat="uhashring")
default = shardring.Ring(nodes)
assert compat.lookup_many(keys[:100_000]) == [theirs.get_node(k) for k in keys[:100_000]]

rows = []
get_node = theirs.get_node
base = best(lambda: [get_node(k) for k in keys], N)
rows.append(("uhashring 2.5 HashRing(hash_fn='ketama').get_node", "str", base))
get_node = dropin.get_node
rows.append(("shardring.uhashring.HashRing.get_node", "str", best(lambda: [get_node(k) for k in keys], N)))
for name, ring in (("Ring(compat='uhashring')", compat), ("Ring() (xxh3)", default)):
    lookup = ring.lookup
    for kind, ks in (("str", keys), ("bytes", bkeys)):
        rows.append((f"{name}.lookup", kind, best(lambda: [lookup(k) for k in ks], N)))
    for kind, ks in (("str", keys), ("bytes", bkeys)):
        rows.append((f"{name}.lookup_many", kind, best(lambda: ring.lookup_many(ks), N)))

print(f"# Python {platform.python_version()}, {ROUNDS} rounds, {N:,} keys, 10 nodes (weights 1-3)")
print(f"| {'call':<55} | keys  | ns/key | × uhashring |")
print(f"|{'-' * 57}|-------|-------:|------------:|")
for call, kind, ns in rows:
    print(f"| {call:<55} | {kind:<5} | {ns:6.0f} | {base / ns:10.1f}× |")
print(json.dumps({"rows": [{"call": c, "keys": k, "ns_per_key": round(ns, 1)} for c, k, ns in rows]}))
