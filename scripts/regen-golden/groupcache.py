#!/usr/bin/env python3
"""Regenerates testdata/groupcache/: where groupcache's consistenthash (Go) puts each key.

Builds `groupcache/main.go` offline against Debian's `golang-github-golang-groupcache-dev` with
Debian's `golang-go` (GOPATH=/usr/share/gocode, GO111MODULE=off: no module proxy), both installed by
this script when missing (apt-get, as root), and runs it over every key of keys.py (with the empty key).

Writes <config>.tsv: a header (`# replicas:`, `# nodes:` in Add order), then HEXKEY<TAB>node.

Usage: scripts/regen-golden/groupcache.py   (from the repository root)
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "scripts", "regen-golden")
sys.path.insert(0, HERE)
from keys import keys  # noqa: E402

OUT = os.path.join(ROOT, "testdata", "groupcache")
PACKAGES = ["golang-go", "golang-github-golang-groupcache-dev"]


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


def find_tie(replicas, count):
    """Two of `count` nodes with a shared CRC-32 point (a birthday search). The names are `peer-` and
    an MD5 in hex: names that differ only in a few bytes (peer-0, peer-1, ...) never collide, as CRC-32
    detects every difference confined to 32 bits."""
    seen = {}
    for n in range(count):
        name = "peer-" + hashlib.md5(str(n).encode()).hexdigest()
        for i in range(replicas):
            h = zlib.crc32(f"{i}{name}".encode())
            if h in seen and seen[h] != name:
                return seen[h], name, h
            seen.setdefault(h, name)
    raise SystemExit("no tie found")


HTTP3 = [f"http://10.0.0.{i + 1}:8080" for i in range(3)]
PEERS10 = [f"10.0.1.{i + 1}:8080" for i in range(10)]


def configs():
    out = [
        ("replicas1", 1, PEERS10),
        ("replicas3", 3, PEERS10),
        ("replicas50", 50, HTTP3),
        ("replicas50-10", 50, PEERS10),
        ("replicas50-removed4", 50, PEERS10[:4] + PEERS10[5:]),
        ("replicas160", 160, PEERS10),
        ("one-node", 50, ["solo"]),
        # "1"+"1x" and "11"+"x" are one string: every such point is shared, the later Add wins.
        ("aliased-names", 3, ["x", "1x", "2x"]),
    ]
    # A real CRC-32 collision between two nodes: the node added later owns the shared point. Both
    # orders, with a neighbour each side so the shared point is not alone on the ring.
    a, b, h = find_tie(50, 20000)
    out.append(("ties-later-wins", 50, ["10.0.9.1:8080", a, b, "10.0.9.2:8080"]))
    out.append(("ties-later-wins-swapped", 50, ["10.0.9.1:8080", b, a, "10.0.9.2:8080"]))
    return out, (a, b, h)


def tie_keys(point, count=8):
    """Keys whose CRC-32 is exactly `point` or just below it: appended so the shared point is hit."""
    found, n = [], 0
    lo = (point - 2**22) % 2**32
    while len(found) < count:
        k = f"tie-{n}".encode()
        c = zlib.crc32(k)
        if lo <= c <= point if lo <= point else (c >= lo or c <= point):
            found.append(k)
        n += 1
    return found


def main():
    ensure_packages()
    version = package_version("golang-github-golang-groupcache-dev")
    os.makedirs(OUT, exist_ok=True)
    cfgs, (a, b, h) = configs()
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src", "groupcache-golden")
        os.makedirs(src)
        shutil.copy(os.path.join(HERE, "groupcache", "main.go"), src)
        env = dict(os.environ, GOPATH=f"{tmp}:/usr/share/gocode", GO111MODULE="off",
                   GOFLAGS="", GOPROXY="off", GOCACHE=os.path.join(tmp, "cache"))
        subprocess.run(["go", "build", "-o", os.path.join(tmp, "golden"), "groupcache-golden"],
                       cwd=tmp, env=env, check=True)
        with open(os.path.join(tmp, "keys.hex"), "w") as f:
            for k in keys(include_empty=True) + tie_keys(h):
                f.write(k.hex() + "\n")
        lines = [f"{n}|{r}|{','.join(nodes)}" for n, r, nodes in cfgs]
        subprocess.run([os.path.join(tmp, "golden"), "keys.hex"], cwd=tmp, check=True,
                       input="\n".join(lines) + "\n", text=True)
        for name, *_ in cfgs:
            with open(os.path.join(tmp, name + ".tsv")) as s:
                text = s.read()
            with open(os.path.join(OUT, name + ".tsv"), "w") as d:
                extra = f"# tie: {a} {b} {h}\n" if name.startswith("ties") else ""
                d.write(f"# golang-github-golang-groupcache-dev {version}\n" + extra + text)
    print(f"wrote {len(cfgs)} files to {OUT}; tie {a} {b} at {h}")


if __name__ == "__main__":
    main()
