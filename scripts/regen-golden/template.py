#!/usr/bin/env python3
"""Regenerates testdata/template/: where the background's article-style Java ketama
(`template/ConsistentHashLoadBalance.java`: MD5("<node>&&<i>"), four points a digest, a TreeMap)
sends each key — the test case of the template rings (`{name}&&{i}`, `md5x4le`).

Needs only a JDK: `default-jdk-headless`, installed by this script when missing (apt-get, as root). Runs
with `-Dfile.encoding=UTF-8` (the code calls getBytes() without a charset). Keys are the keys.py set
that is valid UTF-8, with the empty key: Java reads them into Strings, and the code hashes them as UTF-8.

Writes <config>.tsv: a header (`# vnodes:`, `# nodes:` in list order, `# added:` a node passed to the
buggy addNode, `# removed:` one passed to removeNode), then HEXKEY<TAB>node.

Usage: scripts/regen-golden/template.py   (from the repository root)
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

OUT = os.path.join(ROOT, "testdata", "template")
PACKAGES = ["default-jdk-headless"]

DUBBO5 = [f"192.168.0.{i + 1}:20880" for i in range(5)]
DUBBO10 = [f"192.168.1.{i + 1}:20880" for i in range(10)]
NAMES = ["order-service-a", "order-service-b", "payments", "inventory:8080", "节点-五"]

# name, vnodes, nodes, added with addNode, removed with removeNode
CONFIGS = [
    ("md5x4le-160-5", 160, DUBBO5, "", ""),
    ("md5x4le-160-10", 160, DUBBO10, "", ""),
    ("md5x4le-160-10-removed4", 160, DUBBO10, "", DUBBO10[4]),
    ("md5x4le-40-names", 40, NAMES, "", ""),
    ("md5x4le-162-5", 162, DUBBO5, "", ""),
    ("md5x4le-4-5", 4, DUBBO5, "", ""),
    # addNode's bug: the added node gets the 4 points of MD5("<node>&&0") only.
    ("md5x4le-160-5-added-bug", 160, DUBBO5, "192.168.0.6:20880", ""),
]


def ensure_packages():
    missing = [p for p in PACKAGES
               if subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True,
                                 text=True).stdout != "install ok installed"]
    if missing:
        subprocess.run(["apt-get", "update"], check=True)
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *missing], check=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def utf8(k):
    try:
        k.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def main():
    ensure_packages()
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for f in ("ConsistentHashLoadBalance.java", "TemplateGolden.java"):
            shutil.copy(os.path.join(HERE, "template", f), tmp)
        subprocess.run(["javac", "-encoding", "UTF-8", "ConsistentHashLoadBalance.java",
                        "TemplateGolden.java"], cwd=tmp, check=True)
        all_keys = keys(include_empty=True)
        kept = [k for k in all_keys if utf8(k)]
        with open(os.path.join(tmp, "keys.hex"), "w") as f:
            for k in kept:
                f.write(k.hex() + "\n")
        lines = [f"{n}|{v}|{','.join(nodes)}|{add}|{rm}" for n, v, nodes, add, rm in CONFIGS]
        subprocess.run(["java", "-Dfile.encoding=UTF-8", "TemplateGolden", "keys.hex"], cwd=tmp,
                       check=True, input="\n".join(lines) + "\n", text=True, encoding="utf-8")
        for name, *_ in CONFIGS:
            with open(os.path.join(tmp, name + ".tsv"), encoding="utf-8") as s:
                text = s.read()
            with open(os.path.join(OUT, name + ".tsv"), "w", encoding="utf-8") as d:
                d.write(f"# dropped: {len(all_keys) - len(kept)} keys that are not UTF-8\n" + text)
    print(f"wrote {len(CONFIGS)} files to {OUT}")


if __name__ == "__main__":
    main()
