"""Every compatibility mode places every key of the repository's golden files (made by the real
programs, testdata/) where the program does: the files the Rust library's and the CLI's tests check,
read the same way. A sample is also run through `shardring lookup`, which must agree key for key."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

import shardring
from conftest import TESTDATA, Golden, goldens, shardring_cli


def check(ring: shardring.Ring, g: Golden) -> None:
    keys = g.keys()
    want = g.nodes()
    assert ring.lookup_many(keys) == want, g.path.name
    # One at a time too (another path through the library), and str keys where they are UTF-8.
    assert [ring.lookup(k) for k in keys] == want, g.path.name
    text = [(k.decode(), n) for k, n in g.rows if _utf8(k)]
    assert ring.lookup_many([k for k, _ in text]) == [n for _, n in text], g.path.name


def _utf8(b: bytes) -> bool:
    try:
        b.decode()
        return True
    except UnicodeDecodeError:
        return False


def weighted(spec: str) -> List[Tuple[str, float]]:
    """`name=weight name ...` (weight 1 when left out)."""
    out = []
    for item in spec.split():
        name, sep, w = item.rpartition("=")
        out.append((name, float(w)) if sep else (item, 1.0))
    return out


def removed(ring: shardring.Ring, g: Golden) -> shardring.Ring:
    # Some goldens list the nodes before the removal, others after it.
    gone = g.get("removed")
    if gone and gone in ring:
        ring.remove(gone)
    return ring


@pytest.mark.parametrize("path", goldens("twemproxy"), ids=lambda p: p.stem)
def test_twemproxy_pools_place_as_nutcracker(path: Path) -> None:
    g = Golden(path)
    ring = shardring.Ring.from_twemproxy(path.with_suffix(".yml"))
    # An ejected server (auto_eject_hosts) is out of nutcracker's continuum until it is retried.
    if g.get("ejected"):
        ring.remove(g.get("ejected"))
    check(ring, g)


def test_twemproxy_from_a_node_list_as_the_cli() -> None:
    g = Golden(TESTDATA / "twemproxy" / "ketama-equal3-crc16.tsv")
    nodes = ["127.0.0.1:31001", "127.0.0.1:31002", "127.0.0.1:31003"]
    check(shardring.Ring(nodes, compat="twemproxy", hash="crc16"), g)


LIBMEMCACHED_MODES = {
    "ketama": "libmemcached",
    "ketama-weighted": "libmemcached-weighted",
    "spy": "libmemcached-spy",
    "spy-weighted": "libmemcached-spy-weighted",
}


@pytest.mark.parametrize(
    "path", [p for p in goldens("libmemcached") if p.name != "hashes.tsv"], ids=lambda p: p.stem
)
def test_libmemcached_modes_place_as_libmemcached(path: Path) -> None:
    g = Golden(path)
    nodes = [(s.rsplit(":", 1)[0], float(s.rsplit(":", 1)[1])) for s in g.get("servers").split()]
    hash_ = None if g.get("hash") == "-" else g.get("hash")
    ring = shardring.Ring(nodes, compat=LIBMEMCACHED_MODES[g.get("mode")], hash=hash_)
    check(ring, g)


@pytest.mark.parametrize("path", goldens("uhashring"), ids=lambda p: p.stem)
def test_uhashring_mode_places_as_uhashring(path: Path) -> None:
    g = Golden(path)
    ring = shardring.Ring(weighted(g.get("nodes")), compat="uhashring", vnodes=int(g.get("vnodes")))
    check(removed(ring, g), g)


def test_libketama_places_as_uhashring_where_they_agree() -> None:
    # The CLI's check: on these three nodes no key lands exactly on a point, where the two differ.
    g = Golden(TESTDATA / "uhashring" / "equal3.tsv")
    check(shardring.Ring(weighted(g.get("nodes")), compat="libketama"), g)


@pytest.mark.parametrize("path", goldens("nginx"), ids=lambda p: p.stem)
def test_nginx_mode_places_as_nginx(path: Path) -> None:
    g = Golden(path)
    check(removed(shardring.Ring(weighted(g.get("servers")), compat="nginx"), g), g)


@pytest.mark.parametrize("path", goldens("spymemcached"), ids=lambda p: p.stem)
def test_spymemcached_modes_place_as_spymemcached(path: Path) -> None:
    g = Golden(path)
    if g.get("format") != "SPYMEMCACHED":
        pytest.skip("the LIBMEMCACHED key format is not a mode (the Rust test checks it as libmemcached-weighted)")
    mode = "spymemcached-weighted" if g.get("weighted") == "true" else "spymemcached"
    reps = int(g.get("repetitions"))
    ring = shardring.Ring(
        weighted(g.get("nodes")), compat=mode, hash=g.get("hash"), vnodes=None if reps == 160 else reps
    )
    check(removed(ring, g), g)


@pytest.mark.parametrize("path", goldens("groupcache"), ids=lambda p: p.stem)
def test_groupcache_mode_places_as_groupcache(path: Path) -> None:
    g = Golden(path)
    ring = shardring.Ring(g.get("nodes").split(), compat="groupcache", vnodes=int(g.get("replicas")))
    check(removed(ring, g), g)


@pytest.mark.parametrize(
    "path", [p for p in goldens("template") if "added-bug" not in p.name], ids=lambda p: p.stem
)
def test_template_rings_place_as_the_article_code(path: Path) -> None:
    g = Golden(path)
    ring = shardring.Ring(
        g.get("nodes").split(), compat="template", template="{name}&&{i}", digest="md5x4le",
        vnodes=int(g.get("vnodes")),
    )
    check(removed(ring, g), g)


def test_every_mode_is_covered() -> None:
    covered = {
        "twemproxy", "libmemcached", "libmemcached-weighted", "libmemcached-spy",
        "libmemcached-spy-weighted", "libketama", "uhashring", "nginx", "spymemcached",
        "spymemcached-weighted", "groupcache", "template",
    }
    assert set(shardring.COMPAT_MODES) == covered


# The CLI, on a sample: the same arguments, the same answer for every key.

CLI_CASES: List[Tuple[str, List[str], Dict[str, object]]] = [
    ("libmemcached/ketama-many40.tsv", ["--compat", "libmemcached"], {"compat": "libmemcached"}),
    ("libmemcached/spy-hash-md5.tsv", ["--compat", "libmemcached-spy", "--hash", "md5"],
     {"compat": "libmemcached-spy", "hash": "md5"}),
    ("uhashring/unequal.tsv", ["--compat", "uhashring"], {"compat": "uhashring"}),
    ("nginx/many40.tsv", ["--compat", "nginx"], {"compat": "nginx"}),
    ("spymemcached/weighted.tsv", ["--compat", "spymemcached-weighted", "--hash", "KETAMA_HASH"],
     {"compat": "spymemcached-weighted", "hash": "KETAMA_HASH"}),
    ("groupcache/replicas3.tsv", ["--compat", "groupcache", "--vnodes", "3"],
     {"compat": "groupcache", "vnodes": 3}),
]


def _nodes_of(g: Golden) -> List[Tuple[str, float]]:
    if g.get("servers") and g.get("mode"):
        return [(s.rsplit(":", 1)[0], float(s.rsplit(":", 1)[1])) for s in g.get("servers").split()]
    return weighted(g.get("nodes") or g.get("servers"))


def _cli(args: List[str], keys: List[bytes]) -> List[str]:
    out = subprocess.run(
        [shardring_cli(), "lookup", *args], input=b"".join(k + b"\n" for k in keys),
        capture_output=True, check=True,
    ).stdout
    return [line.rsplit(b"\t", 1)[1].decode() for line in out.splitlines()]


@pytest.mark.parametrize("rel,args,kwargs", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_the_cli_agrees_key_for_key(rel: str, args: List[str], kwargs: Dict[str, object]) -> None:
    g = Golden(TESTDATA / rel)
    nodes = _nodes_of(g)
    keys = [k for k in g.keys() if b"\n" not in k and b"\r" not in k and k]
    spec = ",".join(f"{n}={w:g}" for n, w in nodes)
    ring = shardring.Ring(nodes, **kwargs)
    assert ring.lookup_many(keys) == _cli([*args, "--nodes", spec], keys)


def test_the_cli_agrees_on_a_twemproxy_config() -> None:
    yml = TESTDATA / "twemproxy" / "ketama-named-md5.yml"
    g = Golden(yml.with_suffix(".tsv"))
    keys = [k for k in g.keys() if b"\n" not in k and b"\r" not in k and k]
    assert shardring.Ring.from_twemproxy(yml).lookup_many(keys) == _cli(["--config", str(yml)], keys)


def test_the_default_ring_agrees_with_the_cli() -> None:
    keys = [f"user:{i}".encode() for i in range(5000)]
    nodes = [("a", 1.0), ("b", 2.0), ("c", 0.5)]
    for algorithm in shardring.ALGORITHMS:
        weights = nodes if algorithm in ("ring", "rendezvous", "maglev") else [(n, 1.0) for n, _ in nodes]
        spec = ",".join(f"{n}={w:g}" for n, w in weights)
        ring = shardring.Ring(weights, algorithm=algorithm, hash="fnv1a-64")
        want = _cli(["--algo", algorithm, "--hash", "fnv1a-64", "--nodes", spec], keys)
        assert ring.lookup_many(keys) == want, algorithm
