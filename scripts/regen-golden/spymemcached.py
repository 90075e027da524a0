#!/usr/bin/env python3
"""Regenerates testdata/spymemcached/: where spymemcached's KetamaNodeLocator (Java) puts each key.

Runs the real library: Debian's `libspymemcached-java` (/usr/share/java/spymemcached.jar) on
`default-jdk-headless`, both installed by this script when missing (apt-get, as root). No memcached
is needed: `SpyGolden.java` builds KetamaNodeLocator over stand-in nodes that only answer
getSocketAddress(), and asks getPrimary(key) for every key of keys.py (with the empty key).

Writes <config>.tsv: a header (`# hash:`, `# weighted:`, `# repetitions:`, `# nodes:` as Java prints
each InetSocketAddress, `=WEIGHT` when a weights map was given, `# removed:`), then HEXKEY<TAB>node.

Usage: scripts/regen-golden/spymemcached.py   (from the repository root)
"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "scripts", "regen-golden")
sys.path.insert(0, HERE)
from keys import keys  # noqa: E402

OUT = os.path.join(ROOT, "testdata", "spymemcached")
JAR = "/usr/share/java/spymemcached.jar"
PACKAGES = ["default-jdk-headless", "libspymemcached-java"]


def ensure_packages():
    missing = [p for p in PACKAGES
               if subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True,
                                 text=True).stdout != "install ok installed"]
    if missing:
        subprocess.run(["apt-get", "update"], check=True)
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *missing], check=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def package_version(p):
    return subprocess.run(["dpkg-query", "-W", "-f=${Version}", p], capture_output=True,
                          text=True, check=True).stdout


EQUAL3 = ["10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.3:11211"]
EQUAL10 = [f"10.0.1.{i + 1}:{11211 + i % 3}" for i in range(10)]
WEIGHTED = ["10.0.0.1:11211=1", "10.0.0.2:11211=2", "10.0.0.3:11211=3", "10.0.0.4:11211=5"]
WEIGHTED6 = [f"10.0.2.{i + 1}:11211={i + 1}" for i in range(6)]
# 25 equal weights in a map: the single-precision count gives each 156 points, not 160.
EQUAL25_W = [f"10.0.4.{i + 1}:11211=1" for i in range(25)]
# Host names and addresses: named (a resolved host name), unresolved, IPv6, an IPv4-mapped IPv6.
NAMED = ["cache1/10.0.0.1:11211", "cache2.example.com/10.0.0.2:11211", "cache3/<unresolved>:11211",
         "10.0.0.4:11211", "[::1]:11211", "[fe80::1:2]:11212", "[::ffff:10.0.0.9]:11211",
         "localhost/127.0.0.1:11213"]
# Varied ports: with one port, CRC-32's linearity keeps the points of different nodes apart.
CRC10 = [f"10.0.3.{i + 1}:{11211 + i}" for i in range(10)]

LM_NAMED = ["cache1/10.0.0.1:11211", "cache2.example.com/10.0.0.2:11212", "cache3/<unresolved>:11211",
            "db/10.0.0.5:11300", "cache5/10.0.0.6:11211"]

# name, hash, weighted, repetitions, nodes, index removed afterwards (-1: none)[, key format]
CONFIGS = [
    ("equal3", "KETAMA_HASH", False, 160, EQUAL3, -1),
    ("equal10", "KETAMA_HASH", False, 160, EQUAL10, -1),
    ("equal10-removed4", "KETAMA_HASH", False, 160, EQUAL10, 4),
    ("weighted", "KETAMA_HASH", True, 160, WEIGHTED, -1),
    ("weighted6-removed2", "KETAMA_HASH", True, 160, WEIGHTED6, 2),
    ("weighted-equal25", "KETAMA_HASH", True, 160, EQUAL25_W, -1),
    ("named", "KETAMA_HASH", False, 160, NAMED, -1),
    ("named-weighted", "KETAMA_HASH", True, 160,
     [n + f"={1 + i % 3}" for i, n in enumerate(NAMED)], -1),
    ("native3", "NATIVE_HASH", False, 160, EQUAL3, -1),
    ("fnv1-32", "FNV1_32_HASH", False, 160, EQUAL3, -1),
    ("fnv1a-32", "FNV1A_32_HASH", False, 160, EQUAL3, -1),
    ("fnv1-64", "FNV1_64_HASH", False, 160, EQUAL3, -1),
    ("fnv1a-64", "FNV1A_64_HASH", False, 160, EQUAL10, -1),
    ("native-weighted", "NATIVE_HASH", True, 160, WEIGHTED, -1),
    ("ketama-reps100", "KETAMA_HASH", False, 100, EQUAL10, -1),
    ("fnv1a-32-reps50", "FNV1A_32_HASH", False, 50, EQUAL10, -1),
    # CRC_HASH has 15 bits: 1600 points in 32768 places collide, and keys land on shared points.
    ("crc-ties", "CRC_HASH", False, 160, CRC10, -1),
    ("one-node", "KETAMA_HASH", False, 160, ["10.9.9.9:11211"], -1),
    # The LIBMEMCACHED key format: getHostName(), ":port" unless 11211. Only named servers (an address
    # literal would make Java ask reverse DNS).
    ("libmemcached-format", "KETAMA_HASH", False, 160, LM_NAMED, -1, "LIBMEMCACHED"),
    ("libmemcached-format-weighted", "KETAMA_HASH", True, 160,
     [n + f"={w}" for n, w in zip(LM_NAMED, [1, 2, 3, 5, 1])], -1, "LIBMEMCACHED"),
]


def main():
    ensure_packages()
    version = package_version("libspymemcached-java")
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.join(HERE, "spymemcached", "SpyGolden.java"), tmp)
        subprocess.run(["javac", "-cp", JAR, "SpyGolden.java"], cwd=tmp, check=True)
        with open(os.path.join(tmp, "keys.hex"), "w") as f:
            for k in keys(include_empty=True):
                f.write(k.hex() + "\n")
        lines = [f"{c[0]}|{c[1]}|{str(c[2]).lower()}|{c[3]}|{','.join(c[4])}|{c[5]}"
                 + (f"|{c[6]}" if len(c) > 6 else "") for c in CONFIGS]
        subprocess.run(["java", "-cp", f"{JAR}:.", "SpyGolden", "keys.hex"], cwd=tmp, check=True,
                       input="\n".join(lines) + "\n", text=True)
        for name, *_ in CONFIGS:
            with open(os.path.join(tmp, name + ".tsv")) as src:
                text = src.read()
            with open(os.path.join(OUT, name + ".tsv"), "w") as dst:
                dst.write(f"# libspymemcached-java {version}\n" + text)
    print(f"wrote {len(CONFIGS)} files to {OUT}")


if __name__ == "__main__":
    main()
