"""shardring.pymemcache.Client against a live nutcracker over real memcached servers: every key the
client stores is where nutcracker looks for it and the other way round, multi-key calls are split
per server, and membership followed from etcd (written by `shardring members`) moves the routing."""

from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from pymemcache.client.base import Client as Direct

from conftest import Servers, free_port, shardring_cli
from shardring.pymemcache import Client

# Random keys: sequential ones (user:1, user:2, ...) cluster on a few arcs under fnv1a_64, the
# pools' hash, and could leave a server without any.
_rng = random.Random(30)
KEYS = (
    ["user:1"]
    + [f"user:{_rng.getrandbits(48):012x}" for _ in range(1500)]
    + [f"{{cart{i % 40}}}:item{i}" for i in range(500)]
    + ["ключ-1"]
)


WEIGHTS = [1, 2, 1, 3]


def pool_yaml(listen: int, ports: List[int], named: bool = True) -> str:
    """A pool over `ports` with weights 1, 2, 1, 3; the second server named `cache-b` if `named`."""
    servers = [
        f"   - 127.0.0.1:{p}:{w}" + (" cache-b" if i == 1 and named else "")
        for i, (p, w) in enumerate(zip(ports, WEIGHTS))
    ]
    return (
        "alpha:\n"
        f"  listen: 127.0.0.1:{listen}\n"
        "  hash: fnv1a_64\n"
        "  hash_tag: \"{}\"\n"
        "  distribution: ketama\n"
        "  servers:\n" + "\n".join(servers[: len(ports)]) + "\n"
    )


def start_pool(servers: Servers, n: int = 4) -> Tuple[Path, int, Dict[str, int]]:
    ports = [servers.memcached() for _ in range(n)]
    listen = free_port()
    text = pool_yaml(listen, ports)
    servers.nutcracker(text, listen)
    path = servers.dir / "pool.yml"
    path.write_text(text)
    nodes = {f"127.0.0.1:{p}": p for p in ports}
    nodes["cache-b"] = nodes.pop(f"127.0.0.1:{ports[1]}")
    return path, listen, nodes


def where(key: str, ports: Dict[str, int]) -> List[str]:
    """The servers that hold `key`, asked directly."""
    found = []
    for node, port in ports.items():
        with_direct = Direct(("127.0.0.1", port), allow_unicode_keys=True)
        if with_direct.get(key) is not None:
            found.append(node)
        with_direct.close()
    return found


def test_keys_stored_through_nutcracker_are_found_where_the_client_looks(servers: Servers) -> None:
    path, listen, ports = start_pool(servers)
    via = Direct(("127.0.0.1", listen), allow_unicode_keys=True, default_noreply=False)
    for key in KEYS:
        assert via.set(key, key.encode())
    via.close()
    with Client(path, allow_unicode_keys=True) as client:
        for key in KEYS[::7]:
            assert where(key, ports) == [client.server_for(key)], key
        assert client.get_many(KEYS) == {k: k.encode() for k in KEYS}
        assert client.get("user:1") == b"user:1"
        # A hash tag keeps a cart on one server.
        assert len({client.server_for(f"{{cart3}}:item{i}") for i in range(200)}) == 1
        used = {client.server_for(k) for k in KEYS}
        assert used == set(ports), "every server holds keys"


def test_keys_stored_by_the_client_are_found_through_nutcracker(servers: Servers) -> None:
    path, listen, ports = start_pool(servers)
    with Client(path, allow_unicode_keys=True, default_noreply=False) as client:
        assert client.set_many({k: f"v-{k}".encode() for k in KEYS}) == []
        assert client.set("counter", b"10")
        assert client.incr("counter", 5) == 15
        assert client.add("counter", b"x") is False
        assert client.delete_many(KEYS[:10])
        per_server = client.stats()
        assert set(per_server) == set(ports)
    via = Direct(("127.0.0.1", listen), allow_unicode_keys=True)
    assert via.get_many(KEYS[10:]) == {k: f"v-{k}".encode() for k in KEYS[10:]}
    assert via.get_many(KEYS[:10]) == {}
    assert via.get("counter") == b"15"
    via.close()


def test_a_node_list_with_twemproxy_settings_routes_as_the_file(servers: Servers) -> None:
    ports = [servers.memcached() for _ in range(4)]
    listen = free_port()
    servers.nutcracker(pool_yaml(listen, ports, named=False), listen)
    via = Direct(("127.0.0.1", listen), allow_unicode_keys=True, default_noreply=False)
    for key in KEYS:
        via.set(key, b"1")
    via.close()
    nodes = {f"127.0.0.1:{p}": w for p, w in zip(ports, WEIGHTS)}
    with Client(nodes, hash="fnv1a_64", hash_tag="{}", allow_unicode_keys=True) as client:
        assert client.get_many(KEYS) == {k: b"1" for k in KEYS}
        for key in KEYS[::11]:
            assert where(key, {n: int(n.rsplit(":", 1)[1]) for n in nodes}) == [client.server_for(key)]


def test_key_prefix_is_part_of_the_key_placed(servers: Servers) -> None:
    path, listen, ports = start_pool(servers)
    with Client(path, key_prefix=b"app1:", default_noreply=False) as client:
        client.set_many({k: b"x" for k in KEYS[:300]})
        via = Direct(("127.0.0.1", listen))
        assert via.get_many([f"app1:{k}" for k in KEYS[:300]]) == {f"app1:{k}": b"x" for k in KEYS[:300]}
        via.close()


def test_a_redis_pool_or_a_bad_key_is_refused(tmp_path: Path) -> None:
    redis = tmp_path / "r.yml"
    redis.write_text("r:\n  listen: 127.0.0.1:22121\n  redis: true\n  servers:\n   - 127.0.0.1:6379:1\n")
    with pytest.raises(ValueError, match="redis"):
        Client(redis)
    client = Client(["127.0.0.1:1"])
    with pytest.raises(TypeError):
        client.get(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="host:port"):
        Client(["just-a-name"], compat="nginx")


def _members(url: str, *args: str) -> None:
    subprocess.run([shardring_cli(), "members", "--etcd", url, "--pool", "alpha", *args], check=True,
                   capture_output=True)


def _wait(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


def test_membership_follows_etcd_with_the_proxys_layout(servers: Servers) -> None:
    path, listen, ports = start_pool(servers, 3)
    url = servers.etcd()
    # Publishing succeeds once etcd answers (`members list` refuses a pool that is not there yet).
    _wait(lambda: subprocess.run([shardring_cli(), "members", "--etcd", url, "--pool", "alpha", "--config",
                                  str(path), "publish"], capture_output=True).returncode == 0)
    via = Direct(("127.0.0.1", listen), default_noreply=False)
    for key in KEYS[:800]:
        via.set(key, b"1")
    via.close()
    with Client(path, etcd=url) as client:
        # Published from the YAML file: every key where nutcracker put it.
        assert client.get_many(KEYS[:800]) == {k: b"1" for k in KEYS[:800]}
        assert set(client.ring.nodes) == set(ports)
        # A fourth server joins, then one leaves: the client follows each change (nutcracker's
        # ketama spreads points by weight share, so keys move between the others too).
        extra = servers.memcached()
        _members(url, "add", f"127.0.0.1:{extra}:1")
        _wait(lambda: f"127.0.0.1:{extra}" in client.ring)
        client.set("joined", b"yes")
        assert Direct(("127.0.0.1", ports[client.server_for("joined")] if client.server_for("joined") in ports
                       else extra)).get("joined") == b"yes"
        _members(url, "remove", "cache-b")
        _wait(lambda: "cache-b" not in client.ring)
        assert len(client.clients) == 3
        # The ring is the one the same servers in a YAML file give.
        same = Client(
            [f"127.0.0.1:{p}" for n, p in ports.items() if n != "cache-b"] + [f"127.0.0.1:{extra}"],
            hash_tag="{}",
        )
        assert client.ring.lookup_many(KEYS) == same.ring.lookup_many(KEYS)
        same.close()
