#!/usr/bin/env python3
"""Regenerates testdata/libmemcached/: where libmemcached 1.1 (Debian's libmemcached-dev) puts each key.

Needs: gcc, libmemcached-dev. No server runs: libmemcached hashes without connecting.
Usage: scripts/regen-golden/libmemcached.py   (from the repository root)
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "scripts", "regen-golden")
OUT = os.path.join(ROOT, "testdata", "libmemcached")
sys.path.insert(0, HERE)
from keys import keys  # noqa: E402

HASHES = ["default", "md5", "crc", "fnv1_64", "fnv1a_64", "fnv1_32", "fnv1a_32", "murmur", "jenkins",
          "murmur3"]

EQUAL3 = [f"127.0.0.1:{21001 + i}:1" for i in range(3)]
UNEQUAL = ["127.0.0.1:21001:1", "127.0.0.1:21002:2", "127.0.0.1:21003:3", "127.0.0.1:21004:5"]
PORT11211 = ["10.0.0.1:11211:1", "10.0.0.2:11211:1", "10.0.0.3:11212:2", "cache-d.example.com:11211:1"]
MANY40 = [f"10.1.{i // 10}.{i % 10 + 1}:{11211 + i % 3}:{1 + i % 4}" for i in range(40)]
REMOVED = [s for i, s in enumerate(MANY40) if i != 17]
# crc is a 15-bit hash: 40 servers x 100 points collide often, so these (same servers, opposite
# orders) show that libmemcached gives a tie to the server added first.
CRC40 = [f"10.0.{i // 10}.{i % 10 + 1}:11212:1" for i in range(40)]

CONFIGS = []
for mode in ["ketama", "ketama-weighted", "spy", "spy-weighted"]:
    CONFIGS += [
        (f"{mode}-equal3", mode, "-", EQUAL3),
        (f"{mode}-unequal", mode, "-", UNEQUAL),
        (f"{mode}-port11211", mode, "-", PORT11211),
        (f"{mode}-many40", mode, "-", MANY40),
        (f"{mode}-many40-removed17", mode, "-", REMOVED),
    ]
    for h in HASHES:
        CONFIGS.append((f"{mode}-hash-{h}", mode, h, UNEQUAL))
CONFIGS += [
    ("ketama-ties-crc40", "ketama", "crc", CRC40),
    ("ketama-ties-crc40-reversed", "ketama", "crc", CRC40[::-1]),
    ("spy-ties-crc40-reversed", "spy", "crc", CRC40[::-1]),
]


def main():
    os.makedirs(OUT, exist_ok=True)
    exe = os.path.join(OUT, ".ketama_dump")
    subprocess.run(["gcc", "-O2", "-Wall", "-o", exe, os.path.join(HERE, "libmemcached", "ketama_dump.c"),
                    "-lmemcached"], check=True)
    try:
        keyhex = "".join(k.hex() + "\n" for k in keys(include_empty=True))
        res = subprocess.run([exe, "hashes", "-"], input=keyhex, capture_output=True, text=True, check=True)
        with open(os.path.join(OUT, "hashes.tsv"), "w") as f:
            f.write("# libhashkit hash of each key: memcached_generate_hash_value(key, len, MEMCACHED_HASH_*)\n")
            f.write(res.stdout)
        for name, mode, h, servers in CONFIGS:
            res = subprocess.run([exe, mode, h] + servers, input=keyhex, capture_output=True, text=True)
            if res.returncode != 0:
                print(f"{name}: ketama_dump failed: {res.stderr.strip()}", file=sys.stderr)
                continue
            with open(os.path.join(OUT, name + ".tsv"), "w") as f:
                f.write(f"# mode: {mode}\n# hash: {h}\n# servers: {' '.join(servers)}\n")
                f.write(res.stdout)
            print(f"{name}: {res.stdout.count(chr(10))} keys")
    finally:
        os.unlink(exe)


if __name__ == "__main__":
    main()
