#!/usr/bin/env python3
"""The key set every golden file is made from, printed as one lowercase hex key per line.

Deterministic (fixed seed), so regenerating the goldens hashes the same keys. Shapes: short, long (to
250 bytes), digits, UTF-8, raw bytes >= 0x80, hash-tag shapes, punctuation, random ASCII. Every key is a
valid memcached text-protocol key (1..250 bytes, no space or control byte); each golden script drops the
keys its program cannot carry and says so in its README.

Usage: keys.py [COUNT]   (COUNT random ASCII keys on top of the fixed shapes; default 400)
"""
import random
import sys


def keys(count=400, include_empty=False):
    """The key set; with `include_empty`, the empty key first (for programs that can carry it)."""
    rnd = random.Random(20261130)
    out = []
    # short ASCII and common shapes
    out += [c.encode() for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"]
    out += [f"user:{i}".encode() for i in range(50)]
    out += [f"session:{rnd.getrandbits(64):016x}".encode() for _ in range(30)]
    # digits
    out += [str(i).encode() for i in range(0, 40)]
    out += [str(rnd.randrange(10**12)).encode() for _ in range(30)]
    # long keys, up to the memcached limit of 250 bytes
    alnum = "abcdefghijklmnopqrstuvwxyz0123456789"
    for n in (64, 100, 127, 128, 200, 249, 250):
        for _ in range(3):
            out.append("".join(rnd.choice(alnum) for _ in range(n)).encode())
    # UTF-8
    for s in ["ключ", "キー", "clé", "Schlüssel", "ñandú", "日本語のキー", "😀", "ελληνικά", "한국어",
              "café:42", "naïve-é", "∑∂ƒ", "中文{标签}键"]:
        out.append(s.encode("utf-8"))
    # raw bytes >= 0x80 (not valid UTF-8), one to twelve of them, alone and mixed with ASCII
    for n in range(1, 13):
        for _ in range(4):
            out.append(bytes(rnd.randrange(0x80, 0x100) for _ in range(n)))
    for _ in range(40):
        n = rnd.randrange(1, 40)
        out.append(bytes(rnd.choice([rnd.randrange(0x21, 0x7f), rnd.randrange(0x80, 0x100)]) for _ in range(n)))
    out += [bytes([b]) for b in range(0x80, 0x100, 7)]
    # hash-tag shapes ({} and the other common pair, $$ / ::)
    out += [b"{a}b", b"a{}b", b"}a{", b"{a}{b}", b"x{ab}{cd}", b"{user1000}.following",
            b"{user1000}.followers", b"foo{bar}baz", b"{}", b"{", b"}", b"{{a}}", b"{a", b"a}",
            b"}{", b"{}{a}", b"{\xe9}x", b"pre{\xc3\xa9t\xc3\xa9}post", b"{12345}678",
            b"$a$b", b"a$$b", b":x:y", b"tag:{t1}:a", b"tag:{t1}:b", b"tag:{t2}:a"]
    out += [f"{{t{i % 7}}}:{i}".encode() for i in range(40)]
    # punctuation that proxies treat specially elsewhere
    out += [b"a:b:c", b"a/b/c", b"a.b.c", b"a-b_c", b"%41", b"a%20b", b"+", b"=", b"a=b", b"~!@*()"]
    # random ASCII keys
    printable = "".join(chr(c) for c in range(0x21, 0x7f))
    for _ in range(count):
        n = rnd.randrange(1, 60)
        out.append("".join(rnd.choice(printable) for _ in range(n)).encode())
    seen, uniq = set(), ([b""] if include_empty else [])
    for k in out:
        if k not in seen and 0 < len(k) <= 250:
            seen.add(k)
            uniq.append(k)
    return uniq


if __name__ == "__main__":
    for k in keys(int(sys.argv[1]) if len(sys.argv) > 1 else 1500):
        print(k.hex())
